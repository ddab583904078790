//! `appduct policy set | reset | ls` and `appduct daemon reload` (and SIGHUP) against the
//! built binary and the playground device: policy changes apply to the next call with the
//! session (id and alias) and pending calls untouched, and are persisted to `config.json`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::{Playground, Sandbox, sandbox, signal};

fn session(sb: &Sandbox) -> (String, String) {
    let s = sb.ok(&["sessions", "ls"]);
    assert_eq!(s.as_array().unwrap().len(), 1, "{s}");
    (
        s[0]["sessionId"].as_str().unwrap().to_owned(),
        s[0]["alias"].as_str().unwrap().to_owned(),
    )
}

fn call_sum(sb: &Sandbox) -> (i32, Value) {
    sb.json(&["tools", "call", "sum", "--input", r#"{"a": 1, "b": 2}"#])
}

fn pending_calls(sb: &Sandbox) -> u64 {
    sb.ok(&["daemon", "status"])["daemon"]["pendingCalls"]
        .as_u64()
        .unwrap()
}

fn config(sb: &Sandbox) -> Value {
    serde_json::from_str(&std::fs::read_to_string(sb.state_dir().join("config.json")).unwrap())
        .unwrap()
}

#[test]
fn policy_set_changes_the_next_call_without_dropping_the_session() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    let before = session(&sb);
    let alias = before.1.clone();
    assert_eq!(call_sum(&sb).0, 0);

    // A glob rule over the alias denies the next call; the session stays the same.
    let set = sb.ok(&["policy", "set", "*/sum", "deny"]);
    assert_eq!(set["changed"], true, "{set}");
    let (code, doc) = call_sum(&sb);
    assert_ne!(code, 0, "{doc}");
    assert_eq!(doc["error"]["type"], "policy_denied", "{doc}");
    assert_eq!(
        doc["error"]["details"]["source"], r#"policy.tools["*/sum"]"#,
        "{doc}"
    );
    assert_eq!(session(&sb), before);

    // The change is announced as `policy_changed` (in events.log, which takes every kind but
    // app_event).
    sb.wait_for("policy_changed in events.log", || {
        std::fs::read_to_string(sb.state_dir().join("events.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| {
                e["kind"] == "policy_changed"
                    && e["data"]["cause"] == "set"
                    && e["data"]["target"] == "*/sum"
                    && e["data"]["policy"]["tools"]["*/sum"] == "deny"
            })
    });

    // The more specific exact key wins over the glob, and `policy ls` names it.
    sb.ok(&["policy", "set", &format!("{alias}/sum"), "allow"]);
    assert_eq!(call_sum(&sb).0, 0);
    let ls = sb.ok(&["policy", "ls"]);
    let sum = ls["effective"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tool"] == "sum")
        .unwrap()
        .clone();
    assert_eq!(sum["decision"], "allow");
    assert_eq!(sum["source"], format!("policy.tools[\"{alias}/sum\"]"));

    // Persisted to config.json, the other keys kept.
    let c = config(&sb);
    assert_eq!(c["wssPort"], 0, "{c}");
    assert_eq!(c["policy"]["tools"]["*/sum"], "deny", "{c}");
    assert_eq!(c["policy"]["tools"][format!("{alias}/sum")], "allow", "{c}");

    // Reset one rule: the glob decides again.
    sb.ok(&["policy", "reset", &format!("{alias}/sum")]);
    assert_eq!(call_sum(&sb).1["error"]["type"], "policy_denied");
    // Reset everything: allowed again, the session still the same.
    sb.ok(&["policy", "reset"]);
    assert_eq!(call_sum(&sb).0, 0);
    assert_eq!(config(&sb)["policy"]["tools"], Value::Null);
    assert_eq!(session(&sb), before);

    // Bad targets and decisions are refused.
    let (code, doc) = sb.json(&["policy", "set", "Pixel 8/sum", "deny"]);
    assert_ne!(code, 0, "{doc}");
    let (code, _) = sb.json(&["policy", "set", "default", "maybe"]);
    assert_eq!(code, 64);
    assert_eq!(pg.stop(), 0);
}

#[test]
fn reload_and_sighup_apply_config_json_and_keep_a_pending_call() {
    let sb = sandbox();
    let pg = Playground::start(&sb);
    let before = session(&sb);

    let mut call = sb.command(&["--json", "tools", "call", "slow_task"]);
    call.stdout(Stdio::piped()).stderr(Stdio::null());
    let child = call.spawn().unwrap();
    sb.wait_for("the call to be pending", || pending_calls(&sb) == 1);

    // Edit config.json by hand: a policy change and a key that needs a restart.
    std::fs::write(
        sb.state_dir().join("config.json"),
        json!({"wssPort": 0, "graceSeconds": 77, "policy": {"tools": {"*/sum": "deny"}}})
            .to_string(),
    )
    .unwrap();
    let r = sb.ok(&["daemon", "reload"]);
    assert_eq!(r["applied"], json!(["policy"]), "{r}");
    assert_eq!(r["restartRequired"], json!(["graceSeconds"]), "{r}");
    assert_eq!(call_sum(&sb).1["error"]["type"], "policy_denied");
    assert_eq!(pending_calls(&sb), 1);
    assert_eq!(session(&sb), before);

    // SIGHUP reloads too (and does not stop the daemon).
    std::fs::write(
        sb.state_dir().join("config.json"),
        json!({"wssPort": 0, "policy": {"tools": {"*/sum": "allow"}}}).to_string(),
    )
    .unwrap();
    let pid = sb.daemon_pid().unwrap();
    assert!(signal(pid, "HUP"));
    sb.wait_for("SIGHUP to apply the policy", || call_sum(&sb).0 == 0);
    assert_eq!(sb.daemon_pid(), Some(pid));
    assert_eq!(pending_calls(&sb), 1);
    assert_eq!(session(&sb), before);

    // An invalid file is refused and the running policy stays.
    std::fs::write(sb.state_dir().join("config.json"), "{not json").unwrap();
    let (code, doc) = sb.json(&["daemon", "reload"]);
    assert_ne!(code, 0, "{doc}");
    assert_eq!(call_sum(&sb).0, 0);

    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(72));
    assert_eq!(pg.stop(), 0);
}

#[test]
fn policy_set_refuses_to_erase_a_hand_edit_that_was_not_reloaded() {
    let sb = sandbox();
    sb.ok(&["policy", "set", "*/sum", "deny"]);
    // A person edits config.json by hand and does not reload.
    let path = sb.state_dir().join("config.json");
    let mut doc = config(&sb);
    doc["policy"]["tools"]["*/wipe"] = json!("deny");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();

    let (code, out) = sb.json(&["policy", "set", "*/reset", "deny"]);
    assert_ne!(code, 0, "{out}");
    assert_eq!(out["error"]["type"], "invalid_request", "{out}");
    assert_eq!(out["error"]["details"]["reason"], "config_changed", "{out}");
    assert!(
        out["error"]["hint"]
            .as_str()
            .or(out["error"]["details"]["hint"].as_str())
            .unwrap_or_default()
            .contains("daemon reload"),
        "{out}"
    );
    // The hand edit is still there, and nothing was added.
    let file = config(&sb);
    assert_eq!(file["policy"]["tools"]["*/wipe"], "deny", "{file}");
    assert!(file["policy"]["tools"].get("*/reset").is_none(), "{file}");

    // After a reload the change applies on top of the edit.
    sb.ok(&["daemon", "reload"]);
    let set = sb.ok(&["policy", "set", "*/reset", "deny"]);
    assert_eq!(set["changed"], true, "{set}");
    let file = config(&sb);
    assert_eq!(file["policy"]["tools"]["*/wipe"], "deny", "{file}");
    assert_eq!(file["policy"]["tools"]["*/reset"], "deny", "{file}");
    assert_eq!(file["policy"]["tools"]["*/sum"], "deny", "{file}");
}
