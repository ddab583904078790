//! The fixed MCP surface (§M2, §M3, §M8, §M16 guards 2, 3 and 5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use appduct_mcp::PUBLISHED_ERROR_TYPES;
use appduct_mcp::catalog::{self, INSTRUCTIONS};
use appduct_protocol::errors::ErrorType;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use support::*;

const SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/snapshots/tools_list.json"
);

async fn listed_tools(version: ProtocolVersion) -> Value {
    let h = start(FakeDaemon::new(&[]), TestClient::new(version, None)).await;
    let tools = h.client.peer().list_tools(None).await.unwrap().tools;
    serde_json::to_value(tools).unwrap()
}

#[tokio::test]
async fn tools_list_matches_the_committed_snapshot() {
    let tools = listed_tools(ProtocolVersion::V_2025_11_25).await;
    let pretty = format!("{}\n", serde_json::to_string_pretty(&tools).unwrap());
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(SNAPSHOT, &pretty).unwrap();
    }
    let committed = std::fs::read_to_string(SNAPSHOT).expect("committed snapshot");
    assert_eq!(
        pretty, committed,
        "tools/list changed: review and rerun with UPDATE_SNAPSHOTS=1"
    );
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, catalog::BUILTIN_NAMES);
}

#[tokio::test]
async fn tools_list_stays_within_the_size_budget_on_every_version() {
    for v in [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25] {
        let tools = listed_tools(v).await;
        check_budget(&tools);
    }
    // 2026-07-28 through the raw client.
    let mut raw = RawClient::start(FakeDaemon::new(&[]));
    let (r, _) = raw
        .request(1, "tools/list", json!({"_meta": meta_2026(json!({}))}))
        .await;
    assert_eq!(r["result"]["ttlMs"], json!(3_600_000));
    assert_eq!(r["result"]["cacheScope"], json!("public"));
    check_budget(&r["result"]["tools"]);
}

fn check_budget(tools: &Value) {
    let all = serde_json::to_string(tools).unwrap();
    assert!(
        all.chars().count() <= 16_000,
        "tools/list is {} characters",
        all.len()
    );
    for t in tools.as_array().unwrap() {
        assert!(
            t.to_string().chars().count() <= 2_500,
            "{} is too long",
            t["name"]
        );
        assert!(t["description"].as_str().unwrap().chars().count() <= 300);
        for (key, prop) in t["inputSchema"]["properties"].as_object().unwrap() {
            let d = prop["description"].as_str().unwrap();
            assert!(d.chars().count() <= 120, "{key}");
            if key == "cwd" {
                assert!(d.chars().count() <= 100);
                assert!(
                    d.contains("Optional") && d.contains("defaults to the client's workspace root")
                );
            }
        }
    }
}

fn walk(schema: &Value, closed: &mut Vec<String>, path: &str) {
    if let Value::Object(m) = schema {
        if m.get("additionalProperties") == Some(&json!(false)) {
            closed.push(path.to_owned());
        }
        for (k, v) in m {
            walk(v, closed, &format!("{path}/{k}"));
        }
    } else if let Value::Array(items) = schema {
        for (i, v) in items.iter().enumerate() {
            walk(v, closed, &format!("{path}/{i}"));
        }
    }
}

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "default",
    "description",
    "title",
    "additionalProperties",
];

fn keywords_ok(schema: &Value) {
    let Value::Object(m) = schema else { return };
    for (k, v) in m {
        assert!(KEYWORDS.contains(&k.as_str()), "keyword {k}");
        assert_ne!(k, "$schema");
        if k == "type" {
            assert!(v.is_string(), "no type unions");
        }
        if k == "properties" {
            for p in v.as_object().unwrap().values() {
                keywords_ok(p);
            }
        } else if k == "items" {
            keywords_ok(v);
        }
    }
}

#[tokio::test]
async fn output_schemas_are_open_and_input_roots_closed() {
    let tools = listed_tools(ProtocolVersion::V_2025_11_25).await;
    let with_output: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("outputSchema").is_some())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = catalog::BUILTIN_NAMES
        .iter()
        .copied()
        .filter(|n| *n != catalog::CALL_TOOL && *n != catalog::CALL_RESULT)
        .collect();
    assert_eq!(with_output, expected);
    for t in tools.as_array().unwrap() {
        let mut closed = Vec::new();
        if let Some(out) = t.get("outputSchema") {
            walk(out, &mut closed, "");
            keywords_ok(out);
        }
        assert!(closed.is_empty(), "{}: closed nodes {closed:?}", t["name"]);
        let input = &t["inputSchema"];
        assert_eq!(input["type"], "object");
        assert_eq!(input["additionalProperties"], json!(false));
        keywords_ok(input);
        let ann = &t["annotations"];
        assert!(ann["title"].as_str().unwrap().split(' ').count() <= 4);
        for hint in [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ] {
            assert!(ann[hint].is_boolean(), "{} {hint}", t["name"]);
        }
        assert!(t["title"].is_string());
    }
}

#[test]
fn instructions_name_the_resolution_rules_in_order() {
    assert!(INSTRUCTIONS.chars().count() < 1_500);
    let order = [
        "the cwd argument",
        "workspace root",
        "CLAUDE_PROJECT_DIR",
        "server's own directory",
    ];
    let mut at = 0;
    for source in order {
        let i = INSTRUCTIONS[at..]
            .find(source)
            .unwrap_or_else(|| panic!("{source} after {at}"))
            + at;
        at = i;
    }
    assert!(INSTRUCTIONS.contains("several roots must agree"));
    assert!(INSTRUCTIONS.contains("cwdSource server or claude-project-dir, pass cwd"));
}

#[test]
fn the_published_error_types_are_exactly_the_spec_table() {
    let names: Vec<&str> = PUBLISHED_ERROR_TYPES.iter().map(|t| t.as_str()).collect();
    assert_eq!(
        names,
        [
            "no_session",
            "ambiguous_session",
            "unknown_session",
            "session_not_active",
            "session_suspended",
            "session_leased",
            "policy_denied",
            "invalid_request",
            "tool_not_found",
            "tool_input_validation_error",
            "tool_output_validation_error",
            "tool_execution_error",
            "tool_serialization_error",
            "tool_timeout",
            "tool_cancelled",
            "connection_error",
            "consent_declined",
            "internal_error",
        ]
    );
    // A type outside the set becomes internal_error with the original in details.type.
    let f = appduct_mcp::ToolFailure::new(ErrorType::UsageError, "x");
    assert_eq!(f.error_type, ErrorType::InternalError);
    assert_eq!(f.details.as_deref(), Some(&json!({"type": "usage_error"})));
}

#[tokio::test]
async fn identity_capabilities_and_version_negotiation() {
    let mut raw = RawClient::start(FakeDaemon::new(&[]));
    let r = raw.initialize("2024-11-05", json!({})).await;
    let result = &r["result"];
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(
        result["serverInfo"],
        json!({"name": "appduct", "title": "appduct", "version": env!("CARGO_PKG_VERSION")})
    );
    assert_eq!(
        result["capabilities"],
        json!({"tools": {}, "resources": {}})
    );
    assert_eq!(result["instructions"], INSTRUCTIONS);
    // Unserved methods are -32601.
    let (r, _) = raw.request(2, "prompts/list", json!({})).await;
    assert_eq!(r["error"]["code"], -32601);
    // A cursor other than "" is -32602.
    let (r, _) = raw
        .request(3, "tools/list", json!({"cursor": "next"}))
        .await;
    assert_eq!(r["error"]["code"], -32602);
    let (r, _) = raw.request(4, "tools/list", json!({"cursor": ""})).await;
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 10);
    assert!(r["result"].get("nextCursor").is_none());
    assert!(r["result"].get("ttlMs").is_none());
    // A known version is kept.
    let mut raw = RawClient::start(FakeDaemon::new(&[]));
    assert_eq!(
        raw.initialize("2025-06-18", json!({})).await["result"]["protocolVersion"],
        "2025-06-18"
    );
}

#[tokio::test]
async fn requests_on_2026_need_their_meta() {
    let mut raw = RawClient::start(FakeDaemon::new(&[]));
    let (r, _) = raw
        .request(
            1,
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602);
    let (r, _) = raw
        .request(2, "server/discover", json!({"_meta": meta_2026(json!({}))}))
        .await;
    let result = &r["result"];
    assert_eq!(
        result["supportedVersions"],
        json!(["2025-06-18", "2025-11-25", "2026-07-28"])
    );
    assert_eq!(result["instructions"], INSTRUCTIONS);
    assert_eq!(
        result["capabilities"],
        json!({"tools": {}, "resources": {}})
    );
    let mut meta = meta_2026(json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2030-01-01");
    let (r, _) = raw.request(3, "tools/list", json!({"_meta": meta})).await;
    assert_eq!(r["error"]["code"], -32022);
    // Once the 2026 lifecycle is chosen, `ping` does not exist.
    let (r, _) = raw
        .request(4, "tools/list", json!({"_meta": meta_2026(json!({}))}))
        .await;
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 10);
    let (r, _) = raw
        .request(5, "ping", json!({"_meta": meta_2026(json!({}))}))
        .await;
    assert_eq!(r["error"]["code"], -32601);
}

#[tokio::test]
async fn the_sessions_resource() {
    let fake = FakeDaemon::new(&["sessions.list"]);
    fake.add_session(session("k3J9xQ0vTQm2aB1c", "pixel-8"), vec![]);
    let mut raw = RawClient::start(fake);
    raw.initialize("2025-11-25", json!({})).await;
    let (r, _) = raw.request(1, "resources/list", json!({})).await;
    assert_eq!(
        r["result"]["resources"],
        json!([{"uri": "appduct://sessions", "name": "sessions", "title": "Live sessions",
                "description": "Sessions the appduct daemon holds, as JSON.", "mimeType": "application/json"}])
    );
    let (r, _) = raw
        .request(2, "resources/read", json!({"uri": "appduct://sessions"}))
        .await;
    let c = &r["result"]["contents"][0];
    assert_eq!(c["mimeType"], "application/json");
    let sessions: Value = serde_json::from_str(c["text"].as_str().unwrap()).unwrap();
    assert_eq!(sessions[0]["alias"], "pixel-8");
    let (r, _) = raw
        .request(3, "resources/read", json!({"uri": "appduct://other"}))
        .await;
    assert_eq!(r["error"]["code"], -32002);
    let (r, _) = raw.request(4, "resources/templates/list", json!({})).await;
    assert_eq!(r["result"]["resourceTemplates"], json!([]));
}

#[tokio::test]
async fn a_name_that_is_not_a_builtin_is_tool_not_found() {
    let h = start(
        FakeDaemon::new(&[]),
        TestClient::new(ProtocolVersion::V_2025_11_25, None),
    )
    .await;
    for name in ["sum", "pixel-8__sum"] {
        let r = h.call(name, json!({})).await;
        assert_eq!(error_type(&r), "tool_not_found");
        assert_eq!(error_details(&r), json!({"name": name}));
        let m = error_message(&r);
        assert!(m.contains("appduct_list_tools") && m.contains("appduct_call_tool"));
    }
    assert_eq!(
        h.client
            .service()
            .list_changed
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}
