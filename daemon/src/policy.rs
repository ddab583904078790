//! Policy evaluation (§C11): the effective decision for a tool on a session, the call-time check
//! with consent, and the exact `policy_denied` error (§C4.2, §C11).
//!
//! The policy is read once at daemon start (§C11); [`PolicyEngine`] is immutable, so
//! `tools.list` and `tools.call` always agree.

use std::fmt;
use std::path::{Path, PathBuf};

use appduct_protocol::control::{Consent, DeniedReason, PolicySummary, Settlement};
use appduct_protocol::descriptor::ToolDescriptor;
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use serde_json::{Value, json};

use appduct_client::config::{Config, Decision, Policy};

/// The configuration key that produced a decision (§C11), shown in denials as `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// `policy.tools["<alias>/<tool>"]`; holds the `"<alias>/<tool>"` map key.
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

    /// `details.hint`: names `configKey` and `configPath` (§C11).
    pub fn hint(&self) -> String {
        let change = format!(
            "set {} to \"allow\" in {} and restart the daemon (appduct daemon stop).",
            self.config_key(),
            self.config_path.display()
        );
        match self.reason {
            DeniedReason::Policy => format!("To allow it, {change}"),
            DeniedReason::NoConsentChannel => {
                format!("Call it from an MCP client that supports elicitation, or {change}")
            }
            DeniedReason::OperatorDenied => format!("Ask the operator, or {change}"),
            DeniedReason::ApprovalExpired => format!(
                "Approve it sooner with appduct approvals approve (appduct approvals ls lists pending approvals), or {change}"
            ),
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

/// The daemon's policy and the path of the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEngine {
    policy: Policy,
    config_path: PathBuf,
}

impl PolicyEngine {
    /// `config_path` must be absolute: denials show it to a person (§C11).
    pub fn new(policy: Policy, config_path: impl Into<PathBuf>) -> Self {
        PolicyEngine {
            policy,
            config_path: config_path.into(),
        }
    }

    pub fn from_config(config: &Config) -> Self {
        PolicyEngine::new(config.policy.clone(), config.config_path.clone())
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// §C11 for tool `tool` on the session whose alias is `alias` now. Also the `policy`
    /// of each `tools.list` entry.
    pub fn evaluate(&self, alias: &str, tool: &ToolDescriptor) -> Evaluation {
        self.evaluate_parts(alias, &tool.name, tool.is_destructive())
    }

    /// [`PolicyEngine::evaluate`] from the parts it reads: the tool's name and whether its
    /// `destructiveHint` is `true` (absent counts as `false`).
    pub fn evaluate_parts(&self, alias: &str, tool_name: &str, destructive: bool) -> Evaluation {
        let key = format!("{alias}/{tool_name}");
        if let Some(decision) = self.policy.tools.get(&key) {
            return Evaluation {
                decision: *decision,
                source: PolicySource::Tool(key),
            };
        }
        if destructive {
            Evaluation {
                decision: self.policy.destructive,
                source: PolicySource::Destructive,
            }
        } else {
            Evaluation {
                decision: self.policy.default,
                source: PolicySource::Default,
            }
        }
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
        PolicySummary::new(self.policy.default, self.policy.destructive)
            .with_tools(self.policy.tools.clone())
    }
}
