//! Session aliases (§D9.6): a slug of the claimed `device_model`, unique among live sessions.

/// Longest slug before a collision suffix.
const MAX_SLUG_LEN: usize = 64;
/// The slug of a claim without a usable model.
const FALLBACK: &str = "device";

/// The slug of `model`: ASCII-lowercased (non-ASCII is not case-mapped), each run of characters
/// outside `[a-z0-9]` replaced by one `-`, trimmed of `-`, cut to 64 characters and trimmed of a
/// trailing `-` again. An empty result or no model gives `device`.
pub(super) fn slug(model: Option<&str>) -> String {
    let mut out = String::new();
    let mut in_run = false;
    for c in model.unwrap_or_default().chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    // Only ASCII is left, so byte offsets are character offsets.
    let mut slug = out.trim_matches('-');
    slug = &slug[..slug.len().min(MAX_SLUG_LEN)];
    slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        FALLBACK.to_owned()
    } else {
        slug.to_owned()
    }
}

/// The alias for a new session: the slug if no live session holds it, else the first free of
/// `<slug>-2`, `<slug>-3`, …
///
/// One pass over the live aliases, keeping only this slug's numeric suffixes: a fleet of
/// identical models (thousands of `pixel-8-N`) costs no string per candidate.
pub(super) fn assign<'a>(model: Option<&str>, live: impl IntoIterator<Item = &'a str>) -> String {
    let base = slug(model);
    let mut base_taken = false;
    let mut suffixes: Vec<u64> = Vec::new();
    for alias in live {
        let Some(rest) = alias.strip_prefix(base.as_str()) else {
            continue;
        };
        if rest.is_empty() {
            base_taken = true;
        } else if let Some(n) = rest.strip_prefix('-').and_then(decimal) {
            suffixes.push(n);
        }
    }
    if !base_taken {
        return base;
    }
    suffixes.sort_unstable();
    let mut free = 2u64;
    for n in suffixes {
        if n == free {
            free += 1;
        } else if n > free {
            break;
        }
    }
    format!("{base}-{free}")
}

/// `digits` as the number `format!("{n}")` writes (no sign, no leading zero), if it is one.
fn decimal(digits: &str) -> Option<u64> {
    let canonical = digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    if canonical { digits.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_the_rules_of_02_13() {
        for (model, want) in [
            (Some("Pixel 8"), "pixel-8"),
            (Some("Galaxy S24"), "galaxy-s24"),
            (Some("  iPhone 15 Pro Max!! "), "iphone-15-pro-max"),
            (Some("SM-G991B/DS"), "sm-g991b-ds"),
            (Some("Ñandú Phone"), "and-phone"),
            (Some("---"), "device"),
            (Some(""), "device"),
            (Some("日本語"), "device"),
            (None, "device"),
        ] {
            assert_eq!(slug(model), want, "{model:?}");
        }
    }

    #[test]
    fn long_models_are_cut_to_64_and_retrimmed() {
        let model = format!("{} x", "a".repeat(63));
        // 63 a's, '-', 'x' → cut at 64 leaves a trailing '-' that is trimmed again.
        assert_eq!(slug(Some(&model)), "a".repeat(63));
        assert_eq!(slug(Some(&"b".repeat(100))), "b".repeat(64));
    }

    #[test]
    fn collisions_get_numbered_suffixes_and_freed_aliases_are_reused() {
        assert_eq!(assign(Some("Pixel 8"), []), "pixel-8");
        assert_eq!(assign(Some("Pixel 8"), ["pixel-8"]), "pixel-8-2");
        assert_eq!(
            assign(Some("Pixel 8"), ["pixel-8", "pixel-8-2"]),
            "pixel-8-3"
        );
        // pixel-8 was freed while pixel-8-2 is still live.
        assert_eq!(assign(Some("Pixel 8"), ["pixel-8-2"]), "pixel-8");
        assert_eq!(assign(None, ["device"]), "device-2");
        // The lowest free number, whatever order the live aliases come in.
        assert_eq!(
            assign(
                Some("Pixel 8"),
                ["pixel-8-3", "pixel-8", "pixel-8-2", "pixel-8-5"]
            ),
            "pixel-8-4"
        );
        // Only the exact rendering of a number holds it; other slugs never do.
        assert_eq!(
            assign(
                Some("Pixel 8"),
                ["pixel-8", "pixel-8-02", "pixel-8-x", "pixel-80-2"]
            ),
            "pixel-8-2"
        );
        assert_eq!(
            assign(Some("Pixel"), ["pixel", "pixel-8-2", "pixel-2"]),
            "pixel-3"
        );
    }
}
