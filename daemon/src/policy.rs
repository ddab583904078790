//! Policy evaluation (§C11): the effective decision for a tool on a session, the call-time check
//! with consent, and the exact `policy_denied` error (§C4.2, §C11).
//!
//! The policy is read at daemon start and replaced at runtime by `policy.set`, `policy.reset`
//! and `daemon.reload` (§C8.30–§C8.33). [`PolicyEngine`] clones share one policy behind a lock;
//! each evaluation reads one consistent policy, and the next call sees a change at once.
//!
//! Rule precedence (§C11): among the `policy.tools` keys whose alias part and tool part both
//! match (each part a name or a glob, `*` any run of characters), the most specific wins:
//! a key with a literal tool part beats one with a glob tool part, then a literal alias part
//! beats a glob alias part, then more literal (non-`*`) characters win, and a remaining tie
//! goes to the key first in code-point order. So `pixel-8/reset` > `*/reset` > `pixel-8/*` >
//! `*/*`. No key matching: `policy.destructive` for a destructive tool, else `policy.default`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use appduct_protocol::control::{Consent, DeniedReason, PolicySummary, Settlement};
use appduct_protocol::descriptor::ToolDescriptor;
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::{Value, json};

use appduct_client::config::{Config, Decision, Policy};

/// The configuration key that produced a decision (§C11), shown in denials as `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// `policy.tools["<key>"]`; holds the map key that matched (exact or glob).
    Tool(String),
    /// `policy.destructive`, chosen because `annotations.destructiveHint` is `true`.
    Destructive,
    /// `policy.default`.
    Default,
}

impl fmt::Display for PolicySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySource::Tool(key) => f.write_str(&tool_config_key(key)),
            PolicySource::Destructive => f.write_str("policy.destructive"),
            PolicySource::Default => f.write_str("policy.default"),
        }
    }
}

/// `policy.tools["<key>"]`, with the key quoted as a JSON string (as §C11 shows it).
fn tool_config_key(key: &str) -> String {
    format!("policy.tools[{}]", Value::String(key.to_owned()))
}

/// An effective decision and the key it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub decision: Decision,
    pub source: PolicySource,
}

/// A call that policy lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// `Some` only when a `prompt` decision was satisfied by consent: the value the audit record
    /// carries (§C12.1). An `allow` call never records consent, even when the caller sent it.
    pub consent: Option<Consent>,
}

/// Why policy refused a call, with everything the `policy_denied` error names (§C11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDenial {
    pub reason: DeniedReason,
    /// `deny` or `prompt`.
    pub decision: Decision,
    pub source: PolicySource,
    pub alias: String,
    pub tool: String,
    pub config_path: PathBuf,
}

impl PolicyDenial {
    /// The settlement of a denied call (`outcome: "denied"` with this `deniedReason`).
    pub fn settlement(&self) -> Settlement {
        Settlement::Denied(self.reason)
    }

    /// `policy.tools["<alias>/<tool>"]`: the narrowest key that changes this decision.
    pub fn config_key(&self) -> String {
        tool_config_key(&format!("{}/{}", self.alias, self.tool))
    }

    /// The one-sentence message of §C11.
    pub fn message(&self) -> String {
        let (tool, alias, source, decision) = (
            Value::String(self.tool.clone()),
            &self.alias,
            &self.source,
            self.decision,
        );
        match self.reason {
            DeniedReason::Policy => {
                format!("Policy denies {tool} on {alias} ({source} is \"{decision}\")")
            }
            DeniedReason::NoConsentChannel => format!(
                "{tool} on {alias} needs a person's consent, and this caller cannot ask for it ({source} is \"{decision}\")"
            ),
            DeniedReason::OperatorDenied => {
                format!("An operator denied {tool} on {alias} ({source} is \"{decision}\")")
            }
            DeniedReason::ApprovalExpired => format!(
                "No operator approved {tool} on {alias} in time ({source} is \"{decision}\")"
            ),
        }
    }

    /// `details.hint`: names `configKey` and `configPath` (§C11). It never tells the caller to
    /// loosen policy itself: the caller may be an agent (SECURITY.md §4.12, §4.18).
    pub fn hint(&self) -> String {
        let person = format!(
            "ask the person who runs the daemon whether to set {} to \"allow\" in {}.",
            self.config_key(),
            self.config_path.display(),
        );
        match self.reason {
            DeniedReason::Policy => format!("To allow it, {person}"),
            DeniedReason::NoConsentChannel => {
                format!("Call it from an MCP client that supports elicitation, or {person}")
            }
            DeniedReason::OperatorDenied => {
                "An operator decided: ask the person before calling it again.".to_owned()
            }
            DeniedReason::ApprovalExpired => {
                "Ask the person to approve it sooner with appduct approvals approve in their own terminal.".to_owned()
            }
        }
    }

    /// `data.details` of the error, keys in the order of §C4.2.
    pub fn details(&self) -> Value {
        json!({
            "reason": self.reason,
            "decision": self.decision,
            "source": self.source.to_string(),
            "configKey": self.config_key(),
            "configPath": self.config_path.display().to_string(),
            "hint": self.hint(),
        })
    }

    /// The `-32000` `policy_denied` error; the caller adds `data.callId`.
    pub fn to_error(&self) -> ErrorObject {
        ErrorObject::application(ErrorType::PolicyDenied, self.message())
            .with_details(self.details())
    }
}

impl From<&PolicyDenial> for ErrorObject {
    fn from(denial: &PolicyDenial) -> Self {
        denial.to_error()
    }
}

/// The daemon's policy and the path of the file it came from. Clones share the policy, so a
/// change through one ([`PolicyEngine::replace`]) is seen by every holder.
#[derive(Debug, Clone)]
pub struct PolicyEngine {
    policy: Arc<RwLock<Policy>>,
    config_path: PathBuf,
}

impl PartialEq for PolicyEngine {
    fn eq(&self, other: &Self) -> bool {
        self.config_path == other.config_path && self.policy() == other.policy()
    }
}

impl Eq for PolicyEngine {}

/// How specific a `policy.tools` key is; larger wins (see the module docs).
fn specificity(alias_part: &str, tool_part: &str) -> (bool, bool, usize) {
    (
        !tool_part.contains('*'),
        !alias_part.contains('*'),
        alias_part.len() + tool_part.len()
            - alias_part.matches('*').count()
            - tool_part.matches('*').count(),
    )
}

/// A `policy.tools` key part against a name: literal, or a glob (§C13.5 rules).
fn part_matches(part: &str, name: &str) -> bool {
    if part.contains('*') {
        appduct_protocol::glob::Glob::new(part).is_ok_and(|g| g.matches(name))
    } else {
        part == name
    }
}

/// The `policy.tools` key that decides for `tool_name` on `alias`, by the precedence of the
/// module docs, and its decision.
pub fn matching_rule<'a>(
    tools: &'a BTreeMap<String, Decision>,
    alias: &str,
    tool_name: &str,
) -> Option<(&'a str, Decision)> {
    // Fast path: the exact key is always the most specific. Tools and aliases are short, so
    // the key is put together on the stack (no allocation per call, issue #24).
    let mut stack = [0u8; 256];
    let len = alias.len() + 1 + tool_name.len();
    let heap;
    let exact: &str = if len <= stack.len() {
        stack[..alias.len()].copy_from_slice(alias.as_bytes());
        stack[alias.len()] = b'/';
        stack[alias.len() + 1..len].copy_from_slice(tool_name.as_bytes());
        // Two `str`s joined by an ASCII byte are UTF-8.
        std::str::from_utf8(&stack[..len]).unwrap_or_default()
    } else {
        heap = format!("{alias}/{tool_name}");
        &heap
    };
    if let Some((key, decision)) = tools.get_key_value(exact) {
        return Some((key.as_str(), *decision));
    }
    let mut best: Option<((bool, bool, usize), &'a str, Decision)> = None;
    for (key, decision) in tools {
        let Some((alias_part, tool_part)) = key.split_once('/') else {
            continue;
        };
        if !part_matches(alias_part, alias) || !part_matches(tool_part, tool_name) {
            continue;
        }
        let rank = specificity(alias_part, tool_part);
        // Keys come in code-point order: only a strictly more specific key replaces.
        if best.as_ref().is_none_or(|(r, _, _)| rank > *r) {
            best = Some((rank, key.as_str(), *decision));
        }
    }
    best.map(|(_, key, decision)| (key, decision))
}

impl PolicyEngine {
    /// `config_path` must be absolute: denials show it to a person (§C11).
    pub fn new(policy: Policy, config_path: impl Into<PathBuf>) -> Self {
        PolicyEngine {
            policy: Arc::new(RwLock::new(policy)),
            config_path: config_path.into(),
        }
    }

    pub fn from_config(config: &Config) -> Self {
        PolicyEngine::new(config.policy.clone(), config.config_path.clone())
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// A copy of the policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `policy` in force for every holder; returns the policy it replaced.
    pub fn replace(&self, policy: Policy) -> Policy {
        let mut guard = self.policy.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *guard, policy)
    }

    /// §C11 for tool `tool` on the session whose alias is `alias` now. Also the `policy`
    /// of each `tools.list` entry.
    pub fn evaluate(&self, alias: &str, tool: &ToolDescriptor) -> Evaluation {
        self.evaluate_parts(alias, &tool.name, tool.is_destructive())
    }

    /// [`PolicyEngine::evaluate`] from the parts it reads: the tool's name and whether its
    /// `destructiveHint` is `true` (absent counts as `false`).
    pub fn evaluate_parts(&self, alias: &str, tool_name: &str, destructive: bool) -> Evaluation {
        let policy = self.policy.read().unwrap_or_else(PoisonError::into_inner);
        evaluate_policy(&policy, alias, tool_name, destructive)
    }

    /// Step 6 of the `tools.call` pipeline (§C11). `consent` is the validated param: the
    /// legacy `"client"` was already read as absent.
    pub fn check(
        &self,
        alias: &str,
        tool: &ToolDescriptor,
        consent: Option<Consent>,
    ) -> Result<Permit, PolicyDenial> {
        self.check_parts(alias, &tool.name, tool.is_destructive(), consent)
    }

    /// [`PolicyEngine::check`] from the tool's name and destructive flag.
    pub fn check_parts(
        &self,
        alias: &str,
        tool_name: &str,
        destructive: bool,
        consent: Option<Consent>,
    ) -> Result<Permit, PolicyDenial> {
        let Evaluation { decision, source } = self.evaluate_parts(alias, tool_name, destructive);
        let reason = match (decision, consent) {
            (Decision::Allow, _) => return Ok(Permit { consent: None }),
            (Decision::Prompt, Some(Consent::Elicitation)) => {
                return Ok(Permit {
                    consent: Some(Consent::Elicitation),
                });
            }
            // `operator` is never taken from a caller: only the daemon's own approval sets it.
            (Decision::Prompt, None | Some(Consent::Operator)) => DeniedReason::NoConsentChannel,
            (Decision::Deny, _) => DeniedReason::Policy,
        };
        Err(PolicyDenial {
            reason,
            decision,
            source,
            alias: alias.to_owned(),
            tool: tool_name.to_owned(),
            config_path: self.config_path.clone(),
        })
    }

    /// `daemon.status.policy` (§C8.2): `tools` only when an override is configured.
    pub fn summary(&self) -> PolicySummary {
        let policy = self.policy();
        PolicySummary::new(policy.default, policy.destructive).with_tools(policy.tools)
    }
}

/// §C11 over one policy value.
pub fn evaluate_policy(
    policy: &Policy,
    alias: &str,
    tool_name: &str,
    destructive: bool,
) -> Evaluation {
    if let Some((key, decision)) = matching_rule(&policy.tools, alias, tool_name) {
        return Evaluation {
            decision,
            source: PolicySource::Tool(key.to_owned()),
        };
    }
    if destructive {
        Evaluation {
            decision: policy.destructive,
            source: PolicySource::Destructive,
        }
    } else {
        Evaluation {
            decision: policy.default,
            source: PolicySource::Default,
        }
    }
}

/// How permissive a decision is: `deny` < `prompt` < `allow`.
fn permissiveness(d: Decision) -> u8 {
    match d {
        Decision::Deny => 0,
        Decision::Prompt => 1,
        Decision::Allow => 2,
    }
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Deny => "deny",
        Decision::Prompt => "prompt",
        Decision::Allow => "allow",
    }
}

/// Why replacing `before` with `after` may let some call through more easily than before
/// (SECURITY.md §4.12), or `None` when it cannot: no alias, tool and destructive flag gets a
/// more permissive decision under `after`. Sound and conservative: a rule set whose keys
/// changed is judged without knowing which tools exist, so
/// - a changed `default`/`destructive`, or a key kept with a new decision, loosens when the new
///   decision is more permissive;
/// - an added key loosens unless its decision is no more permissive than every decision
///   `before` could give (its glob may catch any tool);
/// - a removed key loosens unless every decision `after` could give is no more permissive than
///   it (the tools it caught fall to other rules).
///
/// Otherwise every call keeps its rule (same keys), or moves to an added key, or leaves a
/// removed one, and each of those was checked.
pub fn loosening(before: &Policy, after: &Policy) -> Option<String> {
    let looser = |new: Decision, old: Decision| permissiveness(new) > permissiveness(old);
    if looser(after.default, before.default) {
        return Some(format!(
            "default {} -> {}",
            decision_name(before.default),
            decision_name(after.default)
        ));
    }
    if looser(after.destructive, before.destructive) {
        return Some(format!(
            "destructive {} -> {}",
            decision_name(before.destructive),
            decision_name(after.destructive)
        ));
    }
    let all = |p: &Policy| -> Vec<Decision> {
        let mut v = vec![p.default, p.destructive];
        v.extend(p.tools.values().copied());
        v
    };
    let strictest_before = all(before)
        .into_iter()
        .min_by_key(|d| permissiveness(*d))
        .unwrap_or(Decision::Deny);
    let loosest_after = all(after)
        .into_iter()
        .max_by_key(|d| permissiveness(*d))
        .unwrap_or(Decision::Allow);
    for (key, new) in &after.tools {
        match before.tools.get(key) {
            Some(old) if looser(*new, *old) => {
                return Some(format!(
                    "{key} {} -> {}",
                    decision_name(*old),
                    decision_name(*new)
                ));
            }
            Some(_) => {}
            None if looser(*new, strictest_before) => {
                return Some(format!("new rule {key} {}", decision_name(*new)));
            }
            None => {}
        }
    }
    for (key, old) in &before.tools {
        if !after.tools.contains_key(key) && looser(loosest_after, *old) {
            return Some(format!("rule {key} {} removed", decision_name(*old)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(default: Decision, destructive: Decision, keys: &[(&str, Decision)]) -> Policy {
        Policy {
            default,
            destructive,
            tools: tools(keys),
        }
    }

    #[test]
    fn loosening_is_found_and_tightening_passes() {
        use Decision::{Allow, Deny, Prompt};
        let base = policy(Prompt, Deny, &[("pixel-8/reset", Deny), ("*/sum", Prompt)]);
        let loose = |p: Policy| loosening(&base, &p);
        // Unchanged, and every kind of tightening.
        assert_eq!(loose(base.clone()), None);
        assert_eq!(
            loose(policy(
                Deny,
                Deny,
                &[("pixel-8/reset", Deny), ("*/sum", Prompt)]
            )),
            None
        );
        assert_eq!(
            loose(policy(
                Prompt,
                Deny,
                &[("pixel-8/reset", Deny), ("*/sum", Deny)]
            )),
            None
        );
        assert_eq!(
            loose(policy(
                Prompt,
                Deny,
                &[("pixel-8/reset", Deny), ("*/sum", Prompt), ("*/wipe", Deny)]
            )),
            None,
            "an added deny"
        );
        // Loosening.
        assert_eq!(
            loose(policy(
                Allow,
                Deny,
                &[("pixel-8/reset", Deny), ("*/sum", Prompt)]
            ))
            .as_deref(),
            Some("default prompt -> allow")
        );
        assert_eq!(
            loose(policy(
                Prompt,
                Prompt,
                &[("pixel-8/reset", Deny), ("*/sum", Prompt)]
            ))
            .as_deref(),
            Some("destructive deny -> prompt")
        );
        assert_eq!(
            loose(policy(
                Prompt,
                Deny,
                &[("pixel-8/reset", Prompt), ("*/sum", Prompt)]
            ))
            .as_deref(),
            Some("pixel-8/reset deny -> prompt")
        );
        assert_eq!(
            loose(policy(Prompt, Deny, &[("*/sum", Prompt)])).as_deref(),
            Some("rule pixel-8/reset deny removed")
        );
        // A narrow prompt under a broad deny loosens what the deny caught.
        assert_eq!(
            loose(policy(
                Prompt,
                Deny,
                &[
                    ("pixel-8/reset", Deny),
                    ("*/sum", Prompt),
                    ("pixel-8/*", Prompt)
                ]
            ))
            .as_deref(),
            Some("new rule pixel-8/* prompt")
        );
        // Removing an allow rule never loosens.
        let with_allow = policy(Prompt, Deny, &[("*/sum", Allow)]);
        assert_eq!(loosening(&with_allow, &policy(Prompt, Deny, &[])), None);
        // The built-in defaults (all allow) loosen any stricter policy.
        assert!(loosening(&base, &Policy::default()).is_some());
    }

    fn tools(keys: &[(&str, Decision)]) -> BTreeMap<String, Decision> {
        keys.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect()
    }

    fn rule<'a>(t: &'a BTreeMap<String, Decision>, alias: &str, tool: &str) -> Option<&'a str> {
        matching_rule(t, alias, tool).map(|(k, _)| k)
    }

    /// The exact key is put together on the stack up to 256 bytes, on the heap beyond: both
    /// find it (issue #24).
    #[test]
    fn an_exact_rule_matches_at_any_length() {
        let long = "a".repeat(300);
        for (alias, tool) in [
            ("pixel-8", "reset"),
            (long.as_str(), "reset"),
            ("pixel-8", &long),
        ] {
            let exact = format!("{alias}/{tool}");
            let t = tools(&[("*/*", Decision::Allow), (exact.as_str(), Decision::Deny)]);
            assert_eq!(rule(&t, alias, tool), Some(exact.as_str()));
            assert_eq!(rule(&t, alias, "other"), Some("*/*"));
        }
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let t = tools(&[
            ("*/*", Decision::Allow),
            ("pixel-*/*", Decision::Prompt),
            ("pixel-8/*", Decision::Deny),
            ("*/reset", Decision::Deny),
            ("pixel-8/reset", Decision::Allow),
            ("pixel-*/reset", Decision::Prompt),
        ]);
        // Exact beats everything.
        assert_eq!(rule(&t, "pixel-8", "reset"), Some("pixel-8/reset"));
        // A literal tool part beats a glob tool part, whatever the alias part.
        assert_eq!(rule(&t, "pixel-8-2", "reset"), Some("pixel-*/reset"));
        assert_eq!(rule(&t, "galaxy-s24", "reset"), Some("*/reset"));
        // Then a literal alias part beats a glob alias part.
        assert_eq!(rule(&t, "pixel-8", "sum"), Some("pixel-8/*"));
        // Then more literal characters.
        assert_eq!(rule(&t, "pixel-9", "sum"), Some("pixel-*/*"));
        assert_eq!(rule(&t, "galaxy-s24", "sum"), Some("*/*"));
    }

    #[test]
    fn ties_go_to_the_first_key_in_code_point_order() {
        let t = tools(&[("*l-8/sum", Decision::Deny), ("pix*/sum", Decision::Allow)]);
        // Both: literal tool, glob alias, 3 literal alias characters + "sum".
        assert_eq!(rule(&t, "pixel-8", "sum"), Some("*l-8/sum"));
        let t = tools(&[
            ("pix*/sum", Decision::Allow),
            ("pixel*/sum", Decision::Deny),
        ]);
        assert_eq!(rule(&t, "pixel-8", "sum"), Some("pixel*/sum"));
    }

    #[test]
    fn no_matching_rule_falls_back_to_destructive_then_default() {
        let policy = Policy {
            default: Decision::Allow,
            destructive: Decision::Prompt,
            tools: tools(&[("pixel-*/wipe", Decision::Deny)]),
        };
        let e = evaluate_policy(&policy, "galaxy", "wipe", true);
        assert_eq!(
            (e.decision, e.source),
            (Decision::Prompt, PolicySource::Destructive)
        );
        let e = evaluate_policy(&policy, "galaxy", "sum", false);
        assert_eq!(
            (e.decision, e.source),
            (Decision::Allow, PolicySource::Default)
        );
        let e = evaluate_policy(&policy, "pixel-8-2", "wipe", true);
        assert_eq!(e.decision, Decision::Deny);
        assert_eq!(e.source.to_string(), r#"policy.tools["pixel-*/wipe"]"#);
    }

    #[test]
    fn a_replaced_policy_is_seen_by_every_clone() {
        let engine = PolicyEngine::new(Policy::default(), "/s/config.json");
        let clone = engine.clone();
        engine.replace(Policy {
            default: Decision::Deny,
            ..Policy::default()
        });
        assert_eq!(
            clone.evaluate_parts("a", "t", false).decision,
            Decision::Deny
        );
    }
}
