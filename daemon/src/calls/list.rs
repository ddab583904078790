//! `tools.list` semantics (§C8.8) as pure functions over a registry, so every rule is tested
//! without a daemon: group narrowing, the case-insensitive filter, code-point order, paging and
//! the `groups` tree.

use std::collections::BTreeMap;

use appduct_protocol::control::{GroupTotal, PolicyDecision, ToolsListEntry, ToolsListParams};
use appduct_protocol::descriptor::ToolDescriptor;

use crate::control_server::{PAGE_ITEM_BYTES, serialized_len};

/// One page of `tools.list` before serialisation.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsPage {
    pub tools: Vec<ToolsListEntry>,
    pub total: u64,
    pub has_more: bool,
    pub offset: u64,
    pub groups: Vec<GroupTotal>,
}

/// Unicode simple lowercasing, one character at a time. `char::to_lowercase` is the full
/// mapping; the only character whose full lowercase has more than one character (U+0130) has
/// the simple mapping as its first character, so the first character is the simple mapping.
pub fn simple_lowercase(s: &str) -> String {
    s.chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect()
}

/// Whether a tool of `group` falls under the `wanted` group: equal, or a subgroup of it.
/// Case-sensitive; `checkout` does not match `checkoutx`.
pub fn in_group(group: Option<&str>, wanted: &str) -> bool {
    group.is_some_and(|g| {
        g == wanted
            || g.strip_prefix(wanted)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// `groups` over the whole registry, in tree order: each top-level group (counting its
/// subgroups' tools too) followed by its subgroups, tops and subgroups each in code-point order,
/// then `{group: null}` when a tool has no group. An empty registry gives `[]`.
pub fn group_totals(tools: &[ToolDescriptor]) -> Vec<GroupTotal> {
    // top -> (tools in it or below, subgroup -> tools)
    let mut tops: BTreeMap<&str, (u64, BTreeMap<&str, u64>)> = BTreeMap::new();
    let mut ungrouped = 0u64;
    for tool in tools {
        let Some(group) = tool.group.as_deref() else {
            ungrouped += 1;
            continue;
        };
        let (top, sub) = match group.split_once('/') {
            Some((top, _)) => (top, Some(group)),
            None => (group, None),
        };
        let entry = tops.entry(top).or_default();
        entry.0 += 1;
        if let Some(sub) = sub {
            *entry.1.entry(sub).or_default() += 1;
        }
    }
    let mut rows = Vec::new();
    for (top, (total, subs)) in tops {
        rows.push(GroupTotal::new(Some(top.to_owned()), total));
        rows.extend(
            subs.into_iter()
                .map(|(sub, total)| GroupTotal::new(Some(sub.to_owned()), total)),
        );
    }
    if ungrouped > 0 {
        rows.push(GroupTotal::new(None, ungrouped));
    }
    rows
}

/// Steps 2–6 of §C8.8 over `registry` (the session's current tools, in any order).
/// `policy` gives each listed entry its effective decision. The page also ends before its
/// entries pass [`PAGE_ITEM_BYTES`] of JSON (see [`list_tools_within`]).
pub fn list_tools(
    registry: &[ToolDescriptor],
    params: &ToolsListParams,
    policy: impl Fn(&ToolDescriptor) -> PolicyDecision,
) -> ToolsPage {
    list_tools_within(registry, params, policy, PAGE_ITEM_BYTES)
}

/// [`list_tools`] with the page's entries bounded to `max_bytes` of compact JSON (project
/// decision, issue #20): the page ends early, `hasMore` stays `offset + tools.length < total`,
/// and the caller continues at that offset. The first entry is always listed, so paging moves
/// on (one descriptor is far below any such bound: it came in one frame).
pub fn list_tools_within(
    registry: &[ToolDescriptor],
    params: &ToolsListParams,
    policy: impl Fn(&ToolDescriptor) -> PolicyDecision,
    max_bytes: usize,
) -> ToolsPage {
    let filter = params.filter.as_deref().map(simple_lowercase);
    let mut matching: Vec<&ToolDescriptor> = registry
        .iter()
        .filter(|t| {
            params
                .group
                .as_deref()
                .is_none_or(|g| in_group(t.group.as_deref(), g))
        })
        .filter(|t| {
            filter.as_deref().is_none_or(|f| {
                simple_lowercase(&t.name).contains(f)
                    || simple_lowercase(&t.description).contains(f)
            })
        })
        .collect();
    // `str` order is byte order, which for UTF-8 is code-point order.
    matching.sort_by(|a, b| a.name.cmp(&b.name));
    let total = matching.len() as u64;
    let offset = params.offset.unwrap_or(0);
    let skip = usize::try_from(offset).unwrap_or(usize::MAX);
    let take = params
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let mut bytes = 0usize;
    let mut tools: Vec<ToolsListEntry> = Vec::new();
    for t in matching.into_iter().skip(skip).take(take) {
        let entry = ToolsListEntry::from_descriptor(&t.to_map(), policy(t));
        // An entry's comma counts too.
        bytes = bytes.saturating_add(serialized_len(&entry) + 1);
        if bytes > max_bytes && !tools.is_empty() {
            break;
        }
        tools.push(entry);
    }
    let has_more = offset.saturating_add(tools.len() as u64) < total;
    ToolsPage {
        tools,
        total,
        has_more,
        offset,
        groups: group_totals(registry),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str, group: Option<&str>) -> ToolDescriptor {
        ToolDescriptor::new(name.to_owned(), description.to_owned())
            .with_group(group.map(str::to_owned))
    }

    fn names(page: &ToolsPage) -> Vec<&str> {
        page.tools.iter().map(ToolsListEntry::name).collect()
    }

    fn allow(_: &ToolDescriptor) -> PolicyDecision {
        PolicyDecision::Allow
    }

    fn registry() -> Vec<ToolDescriptor> {
        vec![
            tool("pay", "Pay the order.", Some("checkout/payment")),
            tool("add_item", "Add an item to the cart.", Some("checkout")),
            tool("refund", "Refund a payment.", Some("checkout/payment")),
            tool("x_tool", "Odd one.", Some("checkoutx")),
            tool("a_first", "Tree order check.", Some("a")),
            tool("ax", "Tree order check.", Some("a/x")),
            tool("ab", "Tree order check.", Some("a-b")),
            tool("increment", "Add one to the counter.", Some("counter")),
            tool("reset_counter", "Set the counter to ZERO.", None),
        ]
    }

    #[test]
    fn groups_come_in_tree_order_with_the_null_row_last() {
        let rows = group_totals(&registry());
        let got: Vec<(Option<&str>, u64)> =
            rows.iter().map(|r| (r.group.as_deref(), r.total)).collect();
        assert_eq!(
            got,
            [
                (Some("a"), 2),
                (Some("a/x"), 1),
                (Some("a-b"), 1),
                (Some("checkout"), 3),
                (Some("checkout/payment"), 2),
                (Some("checkoutx"), 1),
                (Some("counter"), 1),
                (None, 1),
            ]
        );
        assert_eq!(
            serde_json::to_value(&rows[7]).unwrap(),
            json!({"group": null, "total": 1})
        );
        assert!(group_totals(&[]).is_empty());
        // No ungrouped tool, no null row; a subgroup without direct tools still has its top row.
        let rows = group_totals(&[tool("t", "d", Some("top/sub"))]);
        assert_eq!(
            rows,
            [
                GroupTotal::new(Some("top".into()), 1),
                GroupTotal::new(Some("top/sub".into()), 1)
            ]
        );
    }

    #[test]
    fn group_narrowing_takes_subgroups_and_never_prefixes() {
        let params = ToolsListParams::default().with_group(Some("checkout".into()));
        let page = list_tools(&registry(), &params, allow);
        assert_eq!(names(&page), ["add_item", "pay", "refund"]);
        assert_eq!(page.total, 3);
        // `groups` ignores the narrowing.
        assert_eq!(page.groups.len(), 8);

        let sub = ToolsListParams::default().with_group(Some("checkout/payment".into()));
        assert_eq!(
            names(&list_tools(&registry(), &sub, allow)),
            ["pay", "refund"]
        );
        let unknown = ToolsListParams::default().with_group(Some("nope".into()));
        let page = list_tools(&registry(), &unknown, allow);
        assert!(page.tools.is_empty());
        assert_eq!((page.total, page.has_more), (0, false));
        assert!(!in_group(Some("checkoutx"), "checkout"));
        assert!(!in_group(Some("Checkout"), "checkout"));
        assert!(!in_group(None, "checkout"));
    }

    #[test]
    fn the_filter_is_a_case_insensitive_substring_of_name_or_description() {
        let params = ToolsListParams::default().with_filter(Some("ZERO".into()));
        assert_eq!(
            names(&list_tools(&registry(), &params, allow)),
            ["reset_counter"]
        );
        let params = ToolsListParams::default().with_filter(Some("COUNTER".into()));
        assert_eq!(
            names(&list_tools(&registry(), &params, allow)),
            ["increment", "reset_counter"]
        );
        let params = ToolsListParams::default().with_filter(Some("no such text".into()));
        assert_eq!(list_tools(&registry(), &params, allow).total, 0);
    }

    #[test]
    fn simple_lowercasing_maps_one_character_to_one() {
        assert_eq!(simple_lowercase("ÉCOLE Straße"), "école straße");
        // Full lowercasing would give "i̇" (two characters); the simple mapping is "i".
        assert_eq!(simple_lowercase("\u{130}"), "i");
        assert_eq!(simple_lowercase("ΣΑΣ"), "σασ");
        let registry = [tool("tool", "Élan vital", None)];
        let params = ToolsListParams::default().with_filter(Some("éLAN".into()));
        assert_eq!(list_tools(&registry, &params, allow).total, 1);
    }

    #[test]
    fn paging_counts_before_skipping_and_reports_has_more() {
        let all = list_tools(&registry(), &ToolsListParams::default(), allow);
        assert_eq!(all.total, 9);
        assert!(!all.has_more);
        assert_eq!(
            names(&all),
            [
                "a_first",
                "ab",
                "add_item",
                "ax",
                "increment",
                "pay",
                "refund",
                "reset_counter",
                "x_tool"
            ]
        );
        let page = list_tools(
            &registry(),
            &ToolsListParams::default()
                .with_limit(Some(2))
                .with_offset(Some(3)),
            allow,
        );
        assert_eq!(names(&page), ["ax", "increment"]);
        assert_eq!((page.total, page.has_more, page.offset), (9, true, 3));
        let last = list_tools(
            &registry(),
            &ToolsListParams::default()
                .with_limit(Some(2))
                .with_offset(Some(7)),
            allow,
        );
        assert_eq!(names(&last), ["reset_counter", "x_tool"]);
        assert!(!last.has_more);
        let past = list_tools(
            &registry(),
            &ToolsListParams::default().with_offset(Some(100)),
            allow,
        );
        assert!(past.tools.is_empty());
        assert_eq!((past.total, past.has_more, past.offset), (9, false, 100));
    }

    #[test]
    fn entries_carry_group_and_policy() {
        let mut destructive = tool("wipe", "Wipe.", None);
        destructive.annotations = Some(
            appduct_protocol::descriptor::Annotations::default().with_destructive_hint(Some(true)),
        );
        let registry = [destructive, tool("look", "Look.", Some("g"))];
        let page = list_tools(&registry, &ToolsListParams::default(), |t| {
            if t.is_destructive() {
                PolicyDecision::Deny
            } else {
                PolicyDecision::Allow
            }
        });
        let value = serde_json::to_value(&page.tools).unwrap();
        assert_eq!(
            value,
            json!([
                {"name": "look", "description": "Look.", "group": "g", "policy": "allow"},
                {"name": "wipe", "description": "Wipe.", "annotations": {"destructiveHint": true},
                 "group": null, "policy": "deny"}
            ])
        );
    }

    #[test]
    fn pages_end_before_their_bytes_pass_the_bound_and_paging_by_offset_lists_everything() {
        let all = registry();
        let whole = list_tools(&all, &ToolsListParams::default(), allow);
        let mut seen = Vec::new();
        let mut offset = 0u64;
        loop {
            let params = ToolsListParams::default().with_offset(Some(offset));
            // Room for about two entries; a bound below one entry still lists one.
            for max in [1, 300] {
                let page = list_tools_within(&all, &params, allow, max);
                assert!(!page.tools.is_empty() || offset >= whole.total);
                if max == 1 {
                    assert!(page.tools.len() <= 1);
                }
            }
            let page = list_tools_within(&all, &params, allow, 300);
            assert!(page.tools.len() < all.len(), "the bound ends pages early");
            assert_eq!(page.total, whole.total);
            assert_eq!(page.groups, whole.groups);
            seen.extend(names(&page).into_iter().map(str::to_owned));
            offset += page.tools.len() as u64;
            assert_eq!(page.has_more, offset < page.total);
            if !page.has_more {
                break;
            }
        }
        assert_eq!(seen, names(&whole));
    }

    /// Issue #20 (c): what building the largest `tools.list` page costs. Run with
    /// `cargo test --release -p appduct-daemon --lib largest_page -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn largest_page_build_time() {
        use appduct_protocol::control::ToolsListResult;
        use appduct_protocol::limits::MAX_REGISTRY_BYTES;
        // Worst case per held byte: descriptions of control characters escape to six bytes.
        let description = format!("x{}", "\u{1}".repeat(4_095));
        let mut registry = Vec::new();
        let mut held = 0;
        while registry.len() < 2_048 {
            let t = tool(&format!("t_{:04}", registry.len()), &description, None);
            if held + t.held_bytes() > MAX_REGISTRY_BYTES {
                break;
            }
            held += t.held_bytes();
            registry.push(t);
        }
        let mut samples = Vec::new();
        let mut bytes = 0;
        for _ in 0..5 {
            let start = std::time::Instant::now();
            let page = list_tools(&registry, &ToolsListParams::default(), allow);
            let result = ToolsListResult::new(
                page.tools,
                page.total,
                page.has_more,
                page.offset,
                page.groups,
            );
            bytes = serde_json::to_vec(&result).unwrap().len();
            samples.push(start.elapsed());
        }
        samples.sort();
        println!(
            "largest tools.list page: {} tools held {held} B, reply {bytes} B, build+serialise median {:?} (min {:?}, max {:?})",
            registry.len(),
            samples[2],
            samples[0],
            samples[4]
        );
    }
}
