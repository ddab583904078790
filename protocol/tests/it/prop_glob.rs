//! The linear glob matcher (§C13.5) agrees with a textbook dynamic-programming matcher on
//! arbitrary globs and names, and stays fast on inputs that make backtracking matchers explode.

use appduct_protocol::glob::Glob;
use proptest::prelude::*;

/// Reference: classic O(len(glob) · len(name)) wildcard DP over characters.
fn dp_matches(glob: &str, name: &str) -> bool {
    let g: Vec<char> = glob.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // row[j]: does the glob prefix processed so far match name[..j]?
    let mut row = vec![false; n.len() + 1];
    row[0] = true;
    for &gc in &g {
        let mut next = vec![false; n.len() + 1];
        if gc == '*' {
            next[0] = row[0];
            for j in 1..=n.len() {
                next[j] = row[j] || next[j - 1];
            }
        } else {
            for j in 1..=n.len() {
                next[j] = row[j - 1] && n[j - 1] == gc;
            }
        }
        row = next;
    }
    row[n.len()]
}

/// Small alphabets make matches likely; `?`, `[` and `\` check that they stay literal.
fn glob_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('*'),
            Just('a'),
            Just('b'),
            Just('?'),
            Just('['),
            Just('\\'),
            Just('é')
        ],
        1..12,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn name_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just('b'),
            Just('?'),
            Just('['),
            Just('\\'),
            Just('é'),
            Just('A')
        ],
        0..16,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn agrees_with_the_dp_reference(glob in glob_strategy(), name in name_strategy()) {
        let compiled = Glob::new(&glob).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(compiled.matches(&name), dp_matches(&glob, &name), "glob {:?} name {:?}", glob, name);
    }

    #[test]
    fn agrees_with_the_dp_reference_on_arbitrary_text(glob in "[a*é😀]{1,10}", name in "\\PC{0,12}") {
        let compiled = Glob::new(&glob).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(compiled.matches(&name), dp_matches(&glob, &name));
    }

    #[test]
    fn a_glob_without_star_matches_only_itself(glob in "[^*]{1,20}", name in "[^*]{0,20}") {
        let compiled = Glob::new(&glob).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(compiled.matches(&glob));
        prop_assert_eq!(compiled.matches(&name), name == glob);
    }

    #[test]
    fn a_name_matches_globs_built_from_it(name in "[a-z_]{0,24}", cut in 0usize..25, cut2 in 0usize..25) {
        // Replacing any slice of the name with `*` yields a glob the name matches.
        let (lo, hi) = (cut.min(cut2).min(name.len()), cut.max(cut2).min(name.len()));
        let glob = format!("{}*{}", &name[..lo], &name[hi..]);
        let compiled = Glob::new(&glob).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(compiled.matches(&name));
    }
}

#[test]
fn pathological_globs_terminate_quickly() {
    // `*a*a*…*a*b` against `aaaa…` forces a backtracking matcher into exponential (or at least
    // quadratic-per-piece) work; the linear matcher fails after one scan per piece.
    let glob: String = "*a".repeat(2_000) + "*b";
    assert!(glob.len() <= 4_096);
    let compiled = Glob::new(&glob).unwrap_or_else(|e| panic!("{e}"));
    let name = "a".repeat(1_000_000);
    assert!(!compiled.matches(&name));
    let matching = name.clone() + "b";
    assert!(compiled.matches(&matching));

    // A long literal middle piece that nearly matches everywhere.
    let glob = format!("*{}b*", "a".repeat(4_000));
    let compiled = Glob::new(&glob).unwrap_or_else(|e| panic!("{e}"));
    assert!(!compiled.matches(&name));
}
