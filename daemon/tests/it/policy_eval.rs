//! Policy evaluation, the call-time consent check and the exact `policy_denied` error
//! (§C11, §C4.2).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use appduct_client::config::{Config, Decision, Policy};
use appduct_daemon::policy::{Evaluation, Permit, PolicyEngine, PolicySource};
use appduct_protocol::control::{Consent, DeniedReason, Settlement};
use appduct_protocol::descriptor::{ToolDescriptor, validate_tool_descriptor};
use appduct_protocol::errors::ErrorType;
use serde_json::{Value, json};

const CONFIG: &str = "/home/ana/.appduct/config.json";

fn tool(name: &str, annotations: Option<Value>) -> ToolDescriptor {
    let mut v = json!({"name": name, "description": "test tool"});
    if let Some(a) = annotations {
        v["annotations"] = a;
    }
    validate_tool_descriptor(&v).unwrap()
}

fn destructive(name: &str) -> ToolDescriptor {
    tool(name, Some(json!({"destructiveHint": true})))
}

fn engine(default: Decision, destructive: Decision, tools: &[(&str, Decision)]) -> PolicyEngine {
    let tools: BTreeMap<String, Decision> =
        tools.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect();
    PolicyEngine::new(
        Policy {
            default,
            destructive,
            tools,
        },
        CONFIG,
    )
}

fn eval(decision: Decision, source: PolicySource) -> Evaluation {
    Evaluation { decision, source }
}

#[test]
fn default_applies_to_tools_without_destructive_hint() {
    let e = engine(Decision::Deny, Decision::Allow, &[]);
    for t in [
        tool("plain", None),
        tool("explicit_false", Some(json!({"destructiveHint": false}))),
        // readOnlyHint and idempotentHint never affect policy.
        tool(
            "hinted",
            Some(json!({"readOnlyHint": true, "idempotentHint": true})),
        ),
    ] {
        assert_eq!(
            e.evaluate("pixel-8", &t),
            eval(Decision::Deny, PolicySource::Default),
            "{}",
            t.name
        );
    }
}

#[test]
fn destructive_beats_default_in_both_directions() {
    let e = engine(Decision::Allow, Decision::Prompt, &[]);
    assert_eq!(
        e.evaluate("pixel-8", &destructive("reset_counter")),
        eval(Decision::Prompt, PolicySource::Destructive)
    );
    let e = engine(Decision::Deny, Decision::Allow, &[]);
    assert_eq!(
        e.evaluate("pixel-8", &destructive("reset_counter")),
        eval(Decision::Allow, PolicySource::Destructive)
    );
}

#[test]
fn override_beats_destructive_and_default_in_both_directions() {
    let key = "pixel-8/reset_counter";
    // Override loosens.
    let e = engine(Decision::Deny, Decision::Deny, &[(key, Decision::Allow)]);
    assert_eq!(
        e.evaluate("pixel-8", &destructive("reset_counter")),
        eval(Decision::Allow, PolicySource::Tool(key.into()))
    );
    assert_eq!(
        e.evaluate("pixel-8", &tool("reset_counter", None)),
        eval(Decision::Allow, PolicySource::Tool(key.into()))
    );
    // Override tightens.
    let e = engine(Decision::Allow, Decision::Allow, &[(key, Decision::Deny)]);
    assert_eq!(
        e.evaluate("pixel-8", &destructive("reset_counter")),
        eval(Decision::Deny, PolicySource::Tool(key.into()))
    );
    assert_eq!(
        e.evaluate("pixel-8", &tool("reset_counter", None)),
        eval(Decision::Deny, PolicySource::Tool(key.into()))
    );
}

#[test]
fn overrides_are_keyed_by_alias_and_exact_tool_name() {
    let e = engine(
        Decision::Allow,
        Decision::Allow,
        &[("pixel-8/reset_counter", Decision::Deny)],
    );
    let t = tool("reset_counter", None);
    assert_eq!(
        e.evaluate("pixel-9", &t),
        eval(Decision::Allow, PolicySource::Default)
    );
    assert_eq!(
        e.evaluate("pixel-8", &tool("reset_Counter", None)),
        eval(Decision::Allow, PolicySource::Default)
    );
    assert_eq!(e.evaluate("pixel-8", &t).decision, Decision::Deny);
    assert_eq!(
        e.evaluate_parts("pixel-8", "reset_counter", false),
        e.evaluate("pixel-8", &t)
    );
}

#[test]
fn decisions_table_with_and_without_consent() {
    let cases = [
        (Decision::Allow, None, Ok(Permit { consent: None })),
        (
            Decision::Allow,
            Some(Consent::Elicitation),
            // Consent is not recorded for an allow.
            Ok(Permit { consent: None }),
        ),
        (Decision::Deny, None, Err(DeniedReason::Policy)),
        (
            Decision::Deny,
            Some(Consent::Elicitation),
            Err(DeniedReason::Policy),
        ),
        (Decision::Prompt, None, Err(DeniedReason::NoConsentChannel)),
        (
            Decision::Prompt,
            Some(Consent::Elicitation),
            Ok(Permit {
                consent: Some(Consent::Elicitation),
            }),
        ),
    ];
    let t = destructive("reset_counter");
    for (decision, consent, want) in cases {
        let e = engine(Decision::Allow, decision, &[]);
        let got = e
            .check("pixel-8", &t, consent)
            .map_err(|denial| denial.reason);
        assert_eq!(got, want, "{decision:?} with {consent:?}");
    }
}

#[test]
fn deny_error_matches_the_example_of_03_5_2_exactly() {
    let e = engine(Decision::Allow, Decision::Deny, &[]);
    let denial = e
        .check("pixel-8", &destructive("reset_counter"), None)
        .unwrap_err();
    assert_eq!(
        denial.settlement(),
        Settlement::Denied(DeniedReason::Policy)
    );
    let error = denial
        .to_error()
        .with_call_id("call_Yx1Q9m0v3w6Hk2a8Jd4cFQ");
    let example = r#"{
      "code": -32000,
      "message": "Policy denies \"reset_counter\" on pixel-8 (policy.destructive is \"deny\")",
      "data": {
        "type": "policy_denied",
        "callId": "call_Yx1Q9m0v3w6Hk2a8Jd4cFQ",
        "details": {
          "reason": "policy",
          "decision": "deny",
          "source": "policy.destructive",
          "configKey": "policy.tools[\"pixel-8/reset_counter\"]",
          "configPath": "/home/ana/.appduct/config.json",
          "hint": "To allow it, ask the person who runs the daemon whether to set policy.tools[\"pixel-8/reset_counter\"] to \"allow\" in /home/ana/.appduct/config.json."
        }
      }
    }"#;
    let example: Value = serde_json::from_str(example).unwrap();
    // Key order is kept on both sides, so equal text means equal keys, values and order.
    assert_eq!(
        serde_json::to_string(&error).unwrap(),
        serde_json::to_string(&example).unwrap()
    );
    assert_eq!(error.error_type(), ErrorType::PolicyDenied);
}

#[test]
fn prompt_without_consent_error_names_the_consent_channel() {
    let e = engine(Decision::Allow, Decision::Prompt, &[]);
    let denial = e
        .check("pixel-8", &destructive("reset_counter"), None)
        .unwrap_err();
    assert_eq!(
        denial.settlement(),
        Settlement::Denied(DeniedReason::NoConsentChannel)
    );
    let error = denial.to_error();
    assert_eq!(error.code, -32000);
    assert_eq!(
        error.message,
        "\"reset_counter\" on pixel-8 needs a person's consent, and this caller cannot ask for it (policy.destructive is \"prompt\")"
    );
    assert_eq!(
        error.details().unwrap(),
        &json!({
            "reason": "no_consent_channel",
            "decision": "prompt",
            "source": "policy.destructive",
            "configKey": "policy.tools[\"pixel-8/reset_counter\"]",
            "configPath": CONFIG,
            "hint": "Call it from an MCP client that supports elicitation, or ask the person who runs the daemon whether to set policy.tools[\"pixel-8/reset_counter\"] to \"allow\" in /home/ana/.appduct/config.json."
        })
    );
}

#[test]
fn override_and_default_sources_are_named_in_the_error() {
    let e = engine(
        Decision::Deny,
        Decision::Allow,
        &[("pixel-8/wipe", Decision::Deny)],
    );
    let denial = e.check("pixel-8", &tool("wipe", None), None).unwrap_err();
    let error = denial.to_error();
    assert_eq!(
        error.message,
        "Policy denies \"wipe\" on pixel-8 (policy.tools[\"pixel-8/wipe\"] is \"deny\")"
    );
    let details = error.details().unwrap();
    assert_eq!(details["source"], "policy.tools[\"pixel-8/wipe\"]");
    assert_eq!(details["configKey"], "policy.tools[\"pixel-8/wipe\"]");

    let denial = e.check("pixel-8", &tool("other", None), None).unwrap_err();
    let details = denial.details();
    assert_eq!(details["source"], "policy.default");
    // configKey is always the per-tool key, and the hint names it and the config path.
    assert_eq!(details["configKey"], "policy.tools[\"pixel-8/other\"]");
    let hint = details["hint"].as_str().unwrap();
    assert!(hint.contains("policy.tools[\"pixel-8/other\"]"), "{hint}");
    assert!(hint.contains(CONFIG), "{hint}");
}

#[test]
fn engine_from_config_uses_the_policy_and_the_config_path() {
    let state = Path::new("/home/ana/.appduct");
    let loaded = Config::from_value(
        &json!({"policy": {"destructive": "prompt", "tools": {"pixel-8/reset_counter": "deny"}}}),
        state,
    )
    .unwrap();
    let e = PolicyEngine::from_config(&loaded.config);
    assert_eq!(e.config_path(), Path::new(CONFIG));
    assert_eq!(
        e.evaluate("pixel-8", &destructive("reset_counter"))
            .decision,
        Decision::Deny
    );
    assert_eq!(
        e.evaluate("pixel-8", &destructive("other")).decision,
        Decision::Prompt
    );
    // daemon.status.policy, as in §C8.2.
    assert_eq!(
        serde_json::to_value(e.summary()).unwrap(),
        json!({"default": "allow", "destructive": "prompt",
               "tools": {"pixel-8/reset_counter": "deny"}})
    );
}

#[test]
fn summary_omits_tools_without_overrides() {
    let e = PolicyEngine::from_config(&Config::defaults(Path::new("/s")));
    assert_eq!(
        serde_json::to_string(&e.summary()).unwrap(),
        r#"{"default":"allow","destructive":"allow"}"#
    );
}
