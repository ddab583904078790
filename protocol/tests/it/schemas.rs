//! `docs/schemas/` holds exactly what `appduct_protocol::schema` renders (issue #25), so the
//! committed schemas cannot drift from the code. `UPDATE_SCHEMAS=1` rewrites them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use appduct_protocol::frames::{self, Phase};
use appduct_protocol::schema;
use serde_json::Value;

fn schemas_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schemas"))
}

/// Every `.json` file under `dir`, relative to it.
fn json_files(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            json_files(&path, base, out);
        } else if path.extension().is_some_and(|x| x == "json") {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn committed_schemas_match_the_protocol_crate() {
    let dir = schemas_dir();
    let rendered = schema::all();
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some_and(|v| v == "1");
    let mut on_disk = BTreeSet::new();
    json_files(&dir, &dir, &mut on_disk);
    let mut problems = Vec::new();
    let mut wanted = BTreeSet::new();
    for (rel, value) in &rendered {
        assert!(wanted.insert(rel.clone()), "{rel} is rendered twice");
        let text = schema::render(value);
        let path = dir.join(rel);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(text.as_str()) {
            continue;
        }
        if update {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{rel}: {e}"));
            }
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        } else if current.is_none() {
            problems.push(format!("docs/schemas/{rel} is missing"));
        } else {
            problems.push(format!("docs/schemas/{rel} differs from the code"));
        }
    }
    for stale in on_disk.difference(&wanted) {
        if update {
            std::fs::remove_file(dir.join(stale)).unwrap_or_else(|e| panic!("{stale}: {e}"));
        } else {
            problems.push(format!(
                "docs/schemas/{stale} is not rendered by the code (stale)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the committed schemas drifted from appduct_protocol::schema:\n  {}\n\
         Regenerate them with\n  UPDATE_SCHEMAS=1 cargo test -p appduct-protocol --test it schemas::\n\
         and commit docs/schemas/.",
        problems.join("\n  ")
    );
}

#[test]
fn every_schema_is_a_valid_draft_2020_12_schema() {
    for (rel, value) in schema::all() {
        assert_eq!(value["$schema"], schema::DRAFT, "{rel}");
        assert!(
            jsonschema::draft202012::meta::is_valid(&value),
            "{rel} is not a valid 2020-12 schema"
        );
        jsonschema::draft202012::new(&value).unwrap_or_else(|e| panic!("{rel}: {e}"));
    }
}

/// `instance` against `schema`: every failure with where it is.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), String> {
    let validator = jsonschema::draft202012::new(schema).map_err(|e| format!("bad schema: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("at `{}`: {e}", e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("fails its schema: {}", errors.join("; ")))
    }
}

/// Every object of `v` (at any depth) that looks like a frame: a `type` naming a frame and a
/// `session_id`.
fn frames_in(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
            let known = schema::APP_FRAMES.contains(&ty) || schema::DAEMON_FRAMES.contains(&ty);
            if known && m.contains_key("session_id") {
                out.push(v.clone());
                return;
            }
            m.values().for_each(|c| frames_in(c, out));
        }
        Value::Array(items) => items.iter().for_each(|c| frames_in(c, out)),
        _ => {}
    }
}

/// Whether the crate's own decoder accepts `frame` (the daemon's guard for app frames, the
/// app-side decoder for daemon frames).
fn code_accepts(frame: &Value) -> bool {
    let ty = frame["type"].as_str().unwrap_or_default();
    if schema::DAEMON_FRAMES.contains(&ty) {
        return matches!(frames::decode_daemon_value(frame), Ok(Some(_)));
    }
    let phase = match ty {
        "session_claim" | "session_resume" | "link_refused" => Phase::PreAck,
        _ => Phase::Acked {
            session_id: frame["session_id"].as_str().unwrap_or_default(),
        },
    };
    frames::decode_app_message(&frame.to_string(), phase).is_ok()
}

/// The strongest drift check of the hand-kept device schemas: every frame of the conformance
/// vectors that the code accepts validates against its schema, and every descriptor the vectors
/// call valid validates against the descriptor schema.
#[test]
fn every_frame_the_code_accepts_in_the_vectors_fits_its_schema() {
    let dir = crate::conformance::common::dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let (mut checked, mut refused_by_code) = (0usize, 0usize);
    let mut types = BTreeSet::new();
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut found = Vec::new();
        frames_in(&v, &mut found);
        for frame in found {
            let ty = frame["type"].as_str().unwrap_or_default().to_owned();
            if !code_accepts(&frame) {
                refused_by_code += 1;
                continue;
            }
            let s = schema::app_frame(&ty)
                .or_else(|| schema::daemon_frame(&ty))
                .unwrap_or_else(|| panic!("no schema for {ty}"));
            if let Err(e) = validate(&s, &frame) {
                failures.push(format!("{name}: {ty} {frame}: {e}"));
            }
            checked += 1;
            types.insert(ty);
        }
    }
    for (file, s) in [
        ("tool-descriptors.json", schema::tool_descriptor_schema()),
        ("event-descriptors.json", schema::event_descriptor_schema()),
    ] {
        let v: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}")),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        for case in v.as_array().into_iter().flatten() {
            if case["valid"] != Value::Bool(true) {
                continue;
            }
            if let Err(e) = validate(&s, &case["descriptor"]) {
                failures.push(format!("{file} {}: {e}", case["name"]));
            }
            checked += 1;
        }
    }
    println!(
        "schemas: {checked} vector frames and descriptors checked ({} frame types), \
         {refused_by_code} frames the code refuses skipped",
        types.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 50, "only {checked} vector frames found");
}

/// Boundary cases where the schemas and the code must agree: the null-as-absent and unknown-key
/// rules of params (§C5), cross-field rules, strict device fields (§D1.1) and closed enums.
#[test]
fn schemas_and_validators_agree_on_boundary_cases() {
    use appduct_protocol::control::ControlRequest;
    use serde_json::json;

    let params_cases = [
        ("tools.call", json!({"name": "x"}), true),
        ("tools.call", json!({"name": "x", "selector": null}), true),
        ("tools.call", json!({"name": "x", "selectr": null}), true),
        ("tools.call", json!({"name": "x", "selectr": "a"}), false),
        ("tools.call", json!({"name": null}), false),
        ("tools.call", json!({}), false),
        (
            "tools.call",
            json!({"name": "x", "timeoutMs": 1500.7}),
            true,
        ),
        (
            "tools.call",
            json!({"name": "x", "consent": "client"}),
            true,
        ),
        (
            "tools.call",
            json!({"name": "x", "consent": "other"}),
            false,
        ),
        ("tools.call", json!({"name": "x", "callId": "a b"}), false),
        ("tools.call", json!({"name": "x", "args": []}), false),
        (
            "tools.cancel",
            json!({"callId": "c", "reason": "Client"}),
            false,
        ),
        ("daemon.status", json!({}), true),
        ("daemon.status", Value::Null, true),
        ("daemon.status", json!({"x": 1}), false),
        (
            "daemon.hello",
            json!({"client": {"name": "n", "version": "1", "x": null}}),
            true,
        ),
        (
            "daemon.hello",
            json!({"client": {"name": "n", "version": "1", "x": 1}}),
            false,
        ),
        ("daemon.hello", json!({"client": {"name": "n"}}), false),
        ("daemon.hello", json!({"controlProtocol": 2.0}), true),
        ("daemon.hello", json!({"controlProtocol": 1.5}), false),
        ("daemon.hello", json!({"controlProtocol": 0}), false),
        ("link.create", json!({"ttlSeconds": 86_401}), false),
        ("link.create", json!({"transport": "sealed"}), true),
        (
            "link.create",
            json!({"transport": "web", "addressOverride": "10.0.0.2"}),
            false,
        ),
        (
            "link.create",
            json!({"transport": "web", "addressOverride": null}),
            true,
        ),
        (
            "link.create",
            json!({"transport": "native", "addressOverride": "10.0.0.2"}),
            true,
        ),
        ("events.subscribe", json!({"since": 0}), false),
        ("events.subscribe", json!({"since": null}), true),
        (
            "events.subscribe",
            json!({"since": 0, "sessionSelector": "s"}),
            true,
        ),
        (
            "events.subscribe",
            json!({"since": 0, "sessionSelector": "s", "kinds": ["tools_changed"]}),
            false,
        ),
        (
            "events.subscribe",
            json!({"since": 0, "sessionSelector": "s", "kinds": ["app_event"]}),
            true,
        ),
        ("events.subscribe", json!({"kinds": []}), false),
        (
            "events.subscribe",
            json!({"kinds": ["app_event", "app_event"]}),
            false,
        ),
        ("events.subscribe", json!({"kinds": ["nope"]}), false),
        ("tools.list", json!({"group": "a/b/c"}), false),
        ("tools.list", json!({"group": "a/b", "filter": ""}), true),
        (
            "consent.create",
            json!({"sessionId": "", "name": "t", "argsSha256": "0a".repeat(32)}),
            true,
        ),
        (
            "consent.create",
            json!({"sessionId": "s", "name": "t", "argsSha256": "0A".repeat(32)}),
            false,
        ),
        ("approvals.list", json!({}), true),
        ("approvals.list", json!({"x": 1}), false),
        ("approvals.challenge", json!({"approvalId": "a_1-Z"}), true),
        ("approvals.challenge", json!({"approvalId": ""}), false),
        ("approvals.challenge", json!({"approvalId": "a.b"}), false),
        (
            "approvals.challenge",
            json!({"approvalId": "a".repeat(129)}),
            false,
        ),
        ("approvals.challenge", json!({}), false),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "code": "1".repeat(32)}),
            true,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "code": "1".repeat(33)}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "code": ""}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "maybe"}),
            false,
        ),
        ("approvals.decide", json!({"approvalId": "a"}), false),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "tool", "minutes": 1440}}),
            true,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "tool", "minutes": 1441}}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "tool", "minutes": 0}}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "call", "minutes": 5}}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "call", "minutes": null}}),
            true,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "call", "x": 1}}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "approve", "grant": {"minutes": 5}}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "deny", "grant": {"scope": "call"}}),
            false,
        ),
        (
            "approvals.decide",
            json!({"approvalId": "a", "decision": "deny", "grant": null}),
            true,
        ),
        ("grants.list", Value::Null, true),
        ("calls.list", Value::Null, true),
        ("calls.list", json!({"state": "running"}), false),
        ("grants.revoke", json!({"grantId": "g-1"}), true),
        ("grants.revoke", json!({"grantId": "g 1"}), false),
        ("grants.revoke", json!({"grantId": 1}), false),
    ];
    let mut disagreements = Vec::new();
    for (method, params, valid) in &params_cases {
        let p = (!params.is_null()).then_some(params);
        let code = ControlRequest::parse(method, p).is_ok();
        let schema_ok = schema::method_params(method)
            .map(|s| validate(&s, params).is_ok())
            .unwrap_or(false);
        if code != *valid || schema_ok != *valid {
            disagreements.push(format!(
                "{method} {params}: expected {valid}, code {code}, schema {schema_ok}"
            ));
        }
    }

    let sid = "Yk3wL0pQz7sX2nVa";
    let token = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";
    let claim = |extra: Value| {
        let mut f = json!({"type": "session_claim", "protocol_version": 2, "session_id": sid, "token": token});
        if let (Some(m), Value::Object(e)) = (f.as_object_mut(), extra) {
            m.extend(e);
        }
        f
    };
    let frame_cases = [
        (claim(json!({})), true),
        (claim(json!({"protocol_version": 2.0})), true),
        (claim(json!({"protocol_version": 1})), false),
        (claim(json!({"device_model": null})), false),
        (claim(json!({"device_model": "m".repeat(257)})), false),
        (claim(json!({"unknown_field": {"any": [1]}})), true),
        (claim(json!({"token": ""})), false),
        (
            json!({"type": "tool_error", "session_id": sid, "id": "c1", "error": {"type": "internal_error", "message": "m"}}),
            false,
        ),
        (
            json!({"type": "tool_error", "session_id": sid, "id": "c1", "error": {"type": "tool_execution_error", "message": ""}}),
            true,
        ),
        (
            json!({"type": "tool_result", "session_id": sid, "id": "c1", "result": null}),
            true,
        ),
        (
            json!({"type": "tool_result", "session_id": sid, "id": "c1"}),
            false,
        ),
        (
            json!({"type": "tool_call_progress", "session_id": sid, "id": "c1", "progress": "5"}),
            false,
        ),
        (
            json!({"type": "event", "session_id": sid, "name": "e", "ts": -1}),
            false,
        ),
        (
            json!({"type": "event", "session_id": sid, "name": "e", "ts": 0, "payload": null}),
            true,
        ),
        (
            json!({"type": "tool_registry_delta", "session_id": sid, "operation": "remove"}),
            false,
        ),
        (
            json!({"type": "tool_registry_delta", "session_id": sid, "operation": "remove", "name": "t"}),
            true,
        ),
        (
            json!({"type": "tool_registry_delta", "session_id": sid, "operation": "upsert", "tool": {"name": "t", "description": "d", "annotations": {"x": true}}}),
            false,
        ),
        (
            json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": [{"name": "a b", "description": "d"}]}),
            false,
        ),
        (
            json!({"type": "tool_registry_snapshot", "session_id": sid, "tools": [{"name": "t", "description": "d", "group": null}]}),
            false,
        ),
    ];
    for (frame, valid) in &frame_cases {
        let ty = frame["type"].as_str().unwrap_or_default();
        let code = code_accepts(frame);
        let schema_ok = schema::app_frame(ty)
            .map(|s| validate(&s, frame).is_ok())
            .unwrap_or(false);
        if code != *valid || schema_ok != *valid {
            disagreements.push(format!(
                "{frame}: expected {valid}, code {code}, schema {schema_ok}"
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}
