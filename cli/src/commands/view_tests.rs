//! The human and JSON renderings of the daemon-backed commands.

use appduct_protocol::control::{
    EventNotification, EventsListResult, EventsSinceResult, LinkCreateResult, RevokeResult,
    SessionSummary, StatusResult, ToolsCallResult, ToolsListEntry, ToolsListParams,
    ToolsListResult,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

use super::args::effective_limit;
use super::daemon::lifecycle::{StopMethod, daemon_start, daemon_status, daemon_stop};
use super::daemon::run::daemon_running;
use super::events::{event_line, events_ls, events_since, events_tail_notice};
use super::sessions::link::{Delivery, link_created, web_link_created};
use super::sessions::{sessions_ls, sessions_ls_within, sessions_revoke};
use super::tools::call::tools_call;
use super::tools::describe::tools_describe;
use super::tools::ls::{ToolsLs, tools_ls};
use super::tools::tool_signature;
use crate::output::{Output, OutputFlags};
use crate::render::to_value;

fn now() -> OffsetDateTime {
    datetime!(2026-11-30 11:12:03 UTC)
}

fn session(alias: &str, v: Value) -> SessionSummary {
    let mut base = json!({
        "sessionId": "q3VfZ0xkR2ptTnB4", "alias": alias, "state": "active",
        "transport": "native", "device": {},
        "createdAt": "2026-11-30T10:59:00.000Z", "claimedAt": "2026-11-30T11:00:03.000Z",
        "toolCount": 5, "eventCount": 0
    });
    if let (Some(b), Value::Object(extra)) = (base.as_object_mut(), v) {
        b.extend(extra);
    }
    serde_json::from_value(base).unwrap()
}

#[test]
fn sessions_table_and_empty_message() {
    let sessions = vec![
        session(
            "pixel-8",
            json!({"device": {"manufacturer": "Google", "model": "Pixel 8", "os": "Android 15"}}),
        ),
        session(
            "iphone-15",
            json!({"state": "suspended", "suspendReason": "app_backgrounded",
                       "claimedAt": "2026-11-30T09:12:03Z", "toolCount": 3,
                       "device": {"manufacturer": "Apple", "model": "iPhone 15", "os": "iOS 18.1"}}),
        ),
        session("bare", json!({})),
    ];
    let s = sessions_ls(&sessions, now());
    let expected = "\
ALIAS      STATE                         TRANSPORT  DEVICE                       TOOLS  AGE
pixel-8    active                        native     Google Pixel 8 (Android 15)  5      12m
iphone-15  suspended (app_backgrounded)  native     Apple iPhone 15 (iOS 18.1)   3      2h
bare       active                        native     -                            5      12m
";
    assert_eq!(s.human, expected);
    assert_eq!(s.data.as_array().map(Vec::len), Some(3));
    let empty = sessions_ls(&[], now());
    assert_eq!(empty.data, json!([]));
    assert_eq!(
        empty.human,
        "No sessions. Run \"appduct sessions link\" to connect an app.\n"
    );
}

#[test]
fn sessions_table_shows_the_transport_and_a_sealed_sessions_rng() {
    let sessions = vec![
        session("browser", json!({"transport": "web"})),
        session("pixel-8", json!({"transport": "sealed", "rng": "csprng"})),
        session("hermes", json!({"transport": "sealed", "rng": "drbg"})),
        // A sealed session whose source is not known yet (no field): the transport alone.
        session("sealed-bare", json!({"transport": "sealed"})),
    ];
    let s = sessions_ls(&sessions, now());
    let expected = "\
ALIAS        STATE   TRANSPORT        DEVICE  TOOLS  AGE
browser      active  web              -       5      12m
pixel-8      active  sealed (csprng)  -       5      12m
hermes       active  sealed (drbg)    -       5      12m
sealed-bare  active  sealed           -       5      12m
";
    assert_eq!(s.human, expected);
    // The JSON is the daemon's array, with the same values.
    assert_eq!(s.data[1]["rng"], "csprng");
    assert_eq!(s.data[2]["rng"], "drbg");
    assert!(s.data[3].get("rng").is_none(), "{}", s.data[3]);
}

#[test]
fn revoke_lines() {
    let r: RevokeResult = serde_json::from_value(json!({"ok": true, "sessionId": "q3VfZ0xkR2ptTnB4", "alias": "pixel-8", "revoked": "session"})).unwrap();
    assert_eq!(
        sessions_revoke(&r).human,
        "Revoked pixel-8 (q3VfZ0xkR2ptTnB4).\n"
    );
    let r: RevokeResult = serde_json::from_value(
        json!({"ok": true, "sessionId": "Zk3pQ0mX8sL1vB2n", "alias": null, "revoked": "link"}),
    )
    .unwrap();
    assert_eq!(
        sessions_revoke(&r).human,
        "Discarded pending link Zk3pQ0mX8sL1vB2n.\n"
    );
    assert_eq!(sessions_revoke(&r).data["alias"], Value::Null);
}

fn link(transport: &str, address: &str) -> LinkCreateResult {
    serde_json::from_value(json!({
            "sessionId": "Zk3pQ0mX8sL1vB2n", "transport": transport, "deepLinkPayload": "AgR",
            "endpoint": {"address": address, "port": 8443, "family": if address.contains(':') {6} else {4}},
            "expiresAt": 1_796_037_423u64, "pin": "sha256/47DE="
        }))
        .unwrap()
}

#[test]
fn link_block_native_delivered() {
    let now = datetime!(2026-11-30 09:12:03 UTC);
    let expires = now.unix_timestamp() + 300;
    let mut l = link("native", "127.0.0.1");
    l.expires_at = u64::try_from(expires).unwrap();
    let d = Delivery {
        target: "android".into(),
        device: "emulator-5554".into(),
    };
    let s = link_created(&l, "myapp:///?appduct=AgR&pin=x", Some(&d), now);
    let expected = "\
Link created
  Session:    Zk3pQ0mX8sL1vB2n
  Deep link:  myapp:///?appduct=AgR&pin=x
  Endpoint:   wss://127.0.0.1:8443
  Pin:        sha256/47DE=
  Expires:    2026-11-30T09:17:03Z (in 5m)
  Delivered:  android emulator-5554
";
    assert_eq!(s.human, expected);
    assert_eq!(s.data["delivered"], true);
    assert_eq!(s.data["device"], "emulator-5554");
    assert_eq!(s.data["pin"], "sha256/47DE=");
}

#[test]
fn link_block_web_transport_and_ipv6() {
    let s = link_created(
        &link("web", "127.0.0.1"),
        "myapp:///?appduct=AgR",
        None,
        now(),
    );
    assert!(
        s.human
            .contains("  Endpoint:   ws://127.0.0.1:8443\n  Transport:  web\n")
    );
    assert!(!s.human.contains("Pin:"));
    assert!(s.data.get("pin").is_none());
    assert!(s.data.get("delivered").is_none());
    let s = link_created(&link("native", "fd00::12"), "x", None, now());
    assert!(s.human.contains("wss://[fd00::12]:8443"));
    let w = web_link_created(
        "Zk3",
        "http://x/#appduct=AgR",
        "window.__APPDUCT__.connect(\"AgR\")",
        1,
        now(),
    );
    assert!(
        w.human
            .starts_with("Web link created\n  Session:  Zk3\n  URL:      http://x/#appduct=AgR\n")
    );
    assert!(
        w.human
            .ends_with("Open the URL in the page's tab, or run the script in its console.\n")
    );
    assert_eq!(w.data["url"], "http://x/#appduct=AgR");
}

fn entry(v: Value) -> ToolsListEntry {
    serde_json::from_value(v).unwrap()
}

fn add_item() -> ToolsListEntry {
    entry(json!({
        "name": "add_item",
        "description": "Add an item to the cart.\r\nQuantities above 99 are rejected by the app.\u{7}",
        "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}}, "required": ["sku"]},
        "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]},
        "annotations": {"idempotentHint": true, "readOnlyHint": false},
        "timeout_ms": 5000,
        "group": "checkout", "policy": "allow"
    }))
}

#[test]
fn describe_block_matches_the_spec_layout() {
    let s = tools_describe(&add_item());
    let expected = "\
Tool: add_item
  Signature:     add_item(sku: string, qty?: int = 1) -> { total: number }
  Description:   Add an item to the cart.
                 Quantities above 99 are rejected by the app.
  Policy:        allow
  Group:         checkout
  Annotations:   idempotentHint=true, readOnlyHint=false
  Timeout (ms):  5000
  Input schema:
    {
      \"type\": \"object\",
      \"properties\": {
        \"sku\": {
          \"type\": \"string\"
        },
        \"qty\": {
          \"type\": \"integer\",
          \"default\": 1
        }
      },
      \"required\": [
        \"sku\"
      ]
    }
  Output schema:
    {
      \"type\": \"object\",
      \"properties\": {
        \"total\": {
          \"type\": \"number\"
        }
      },
      \"required\": [
        \"total\"
      ]
    }
";
    assert_eq!(s.human, expected);
    assert_eq!(
        s.data["signature"],
        "add_item(sku: string, qty?: int = 1) -> { total: number }"
    );
    assert_eq!(s.data["group"], "checkout");
    assert_eq!(s.data["policy"], "allow");

    let bare = tools_describe(&entry(
        json!({"name": "ping", "description": "Ping.", "group": null, "policy": "deny"}),
    ));
    assert_eq!(
        bare.human,
        "Tool: ping\n  Signature:    ping()\n  Description:  Ping.\n  Policy:       deny\n  Input schema:\n    (none)\n  Output schema:\n    (none)\n"
    );
}

#[test]
fn call_result_and_meta() {
    let r: ToolsCallResult = serde_json::from_value(json!({"result": {"total": 3}, "callId": "cli-1", "sessionId": "q3V", "alias": "pixel-8", "durationMs": 41})).unwrap();
    let s = tools_call("sum", &r);
    assert_eq!(
        s.human,
        "Result (sum on pixel-8, 41 ms)\n  {\n    \"total\": 3\n  }\n"
    );
    assert_eq!(s.data, json!({"total": 3}));
    assert_eq!(s.meta["call"]["callId"], "cli-1");
    assert_eq!(s.meta["call"]["durationMs"], 41);
}

fn tool(name: &str, group: Option<&str>, policy: &str) -> Value {
    json!({"name": name, "description": format!("Does {name}."), "group": group, "policy": policy})
}

fn list(
    tools: Vec<Value>,
    total: u64,
    has_more: bool,
    offset: u64,
    groups: Value,
) -> ToolsListResult {
    serde_json::from_value(json!({"tools": tools, "total": total, "hasMore": has_more, "offset": offset, "groups": groups})).unwrap()
}

fn ls_req(params: ToolsListParams) -> ToolsLs {
    ToolsLs {
        params,
        groups_only: false,
        full: false,
    }
}

#[test]
fn tools_ls_grouped_layout_with_footer() {
    let result = list(
        vec![
            json!({"name": "add_item", "description": "Add an item to the cart.", "group": "checkout", "policy": "allow",
                       "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}}, "required": ["sku"]},
                       "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}}),
            json!({"name": "pay", "description": "Charge the customer for the current cart.", "group": "checkout/payment", "policy": "prompt",
                       "input_schema": {"type": "object", "properties": {"method": {"enum": ["card", "cash"]}}, "required": ["method"]},
                       "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}),
            json!({"name": "sum", "description": "Add two numbers.", "group": null, "policy": "allow",
                       "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
                       "output_schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}}),
        ],
        30,
        true,
        0,
        json!([{"group": "checkout", "total": 8}, {"group": "checkout/payment", "total": 3},
                   {"group": "counter", "total": 2}, {"group": "diagnostics", "total": 3}, {"group": null, "total": 14}]),
    );
    let s = tools_ls(
        &ls_req(ToolsListParams::default().with_limit(Some(3))),
        &result,
        "pixel-8",
    );
    let expected = "\
Tools on pixel-8
  checkout
    add_item(sku: string, qty?: int = 1) -> { total: number }
      Add an item to the cart.
    checkout/payment
      pay(method: \"card\" | \"cash\") -> { ok: bool }  [prompt]
        Charge the customer for the current cart.
  (ungrouped)
    sum(a: number, b: number) -> { total: number }
      Add two numbers.

Showing 3 of 30 tools (offset 0). Narrow with --filter <text> or --group <name> (groups: checkout 8, counter 2, diagnostics 3), or page with --offset 3.
Run \"appduct tools describe <name>\" to see a tool's schemas.
";
    assert_eq!(s.human, expected);
    assert_eq!(s.data["limit"], 3);
    assert!(
        s.data.get("offset").is_none(),
        "only inputs the user gave are echoed"
    );
    assert!(s.data.get("filter").is_none());
}

#[test]
fn tools_ls_flat_layout_without_footer() {
    let result = list(
        vec![tool("a", None, "allow"), tool("b", None, "deny")],
        2,
        false,
        0,
        json!([{"group": null, "total": 2}]),
    );
    let s = tools_ls(&ls_req(ToolsListParams::default()), &result, "p");
    assert_eq!(
        s.human,
        "Tools on p\n  a()\n    Does a.\n  b()  [deny]\n    Does b.\n\nRun \"appduct tools describe <name>\" to see a tool's schemas.\n"
    );
    // --group: flat, title names the group, no group hint in the footer.
    let result = list(
        vec![tool("a", Some("g/x"), "allow")],
        2,
        true,
        0,
        json!([{"group": "g", "total": 2}, {"group": "g/x", "total": 2}]),
    );
    let s = tools_ls(
        &ls_req(
            ToolsListParams::default()
                .with_group(Some("g".into()))
                .with_limit(Some(1)),
        ),
        &result,
        "p",
    );
    assert_eq!(
        s.human,
        "Tools in group g on p\n  a()\n    Does a.\n\nShowing 1 of 2 tools (offset 0). Narrow with --filter <text>, or page with --offset 1.\nRun \"appduct tools describe <name>\" to see a tool's schemas.\n"
    );
}

#[test]
fn tools_ls_footer_caps_the_group_list() {
    let groups: Vec<Value> = (0..12)
        .map(|i| json!({"group": format!("g{i:02}"), "total": 1}))
        .collect();
    let result = list(
        vec![tool("a", Some("g00"), "allow")],
        12,
        false,
        11,
        Value::Array(groups),
    );
    let s = tools_ls(
        &ls_req(ToolsListParams::default().with_offset(Some(11))),
        &result,
        "p",
    );
    assert!(s.human.contains("(groups: g00 1, g01 1, g02 1, g03 1, g04 1, g05 1, g06 1, g07 1, g08 1, g09 1, … 2 more; see --groups)."), "{}", s.human);
    assert!(!s.human.contains("--offset 12"));
}

#[test]
fn tools_ls_empty_messages() {
    let empty = |total, offset| list(vec![], total, false, offset, json!([]));
    let req = |group: Option<&str>, filter: Option<&str>| {
        ls_req(
            ToolsListParams::default()
                .with_group(group.map(str::to_owned))
                .with_filter(filter.map(str::to_owned)),
        )
    };
    assert_eq!(
        tools_ls(&req(None, None), &empty(0, 0), "pixel-8").human,
        "No tools registered on pixel-8.\n"
    );
    assert_eq!(
        tools_ls(&req(Some("checkout"), None), &empty(0, 0), "pixel-8").human,
        "No tools in group \"checkout\" on pixel-8. Run \"appduct tools ls --groups\" to list groups.\n"
    );
    assert_eq!(
        tools_ls(&req(None, Some("zz")), &empty(0, 0), "pixel-8").human,
        "No tools match \"zz\" on pixel-8.\n"
    );
    assert_eq!(
        tools_ls(&req(Some("g"), Some("zz")), &empty(0, 0), "pixel-8").human,
        "No tools match \"zz\" in group \"g\" on pixel-8.\n"
    );
    assert_eq!(
        tools_ls(&req(None, None), &empty(7, 50), "pixel-8").human,
        "No tools at offset 50; 7 matching tools in total.\n"
    );
}

#[test]
fn tools_ls_groups_summary() {
    let result = list(
        vec![],
        11,
        false,
        0,
        json!([{"group": "checkout", "total": 8}, {"group": "checkout/payment", "total": 3}, {"group": "counter", "total": 2}, {"group": null, "total": 1}]),
    );
    let req = ToolsLs {
        params: ToolsListParams::default(),
        groups_only: true,
        full: false,
    };
    let s = tools_ls(&req, &result, "pixel-8");
    let expected = "\
Groups on pixel-8
  checkout             8
    checkout/payment   3
  counter              2
  (ungrouped)          1
Total: 11 tools
";
    assert_eq!(s.human, expected);
    assert_eq!(
        s.data.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["groups", "total"]
    );
}

#[test]
fn tools_ls_full_renders_describe_blocks() {
    let result = list(
        vec![tool("a", None, "allow")],
        1,
        false,
        0,
        json!([{"group": null, "total": 1}]),
    );
    let req = ToolsLs {
        params: ToolsListParams::default(),
        groups_only: false,
        full: true,
    };
    let s = tools_ls(&req, &result, "p");
    assert!(
        s.human
            .starts_with("Tools on p\n\n  Tool: a\n    Signature:"),
        "{}",
        s.human
    );
}

fn out() -> Output {
    Output::plain(OutputFlags::default())
}

fn app_event(payload: Value) -> EventNotification {
    serde_json::from_value(json!({"kind": "app_event", "sessionId": "q3V", "alias": "pixel-8", "ts": 1796029923120u64, "seq": 4, "data": payload})).unwrap()
}

#[test]
fn event_lines_full_and_truncated() {
    let n =
        app_event(json!({"name": "checkout_completed", "payload": {"orderId": "A-17"}, "ts": 1}));
    assert_eq!(
        event_line(&n, &out()).unwrap(),
        "2026-11-30T09:12:03Z  pixel-8  checkout_completed  {\"orderId\":\"A-17\"}\n"
    );
    let n = app_event(
        json!({"name": "big", "payloadPreview": "{\"a\":\"xx", "truncated": true, "payloadBytes": 9000, "ts": 1}),
    );
    assert_eq!(
        event_line(&n, &out()).unwrap(),
        "2026-11-30T09:12:03Z  pixel-8  big  {\"a\":\"xx… (9000 bytes, truncated)\n"
    );
    assert_eq!(
        events_tail_notice(None),
        "Listening for app events on all sessions (Ctrl-C to stop)…"
    );
}

#[test]
fn device_refused_lines_name_the_field_and_the_close() {
    let n: EventNotification = serde_json::from_value(json!({"kind": "device_refused",
        "ts": 1796029923120u64, "seq": 0,
        "data": {"transport": "native", "code": 1008, "reason": "invalid_token",
                 "frameType": "session_claim", "field": "token",
                 "problem": "must be the unpadded base64url of the link's 32 token bytes (43 characters)"}}))
    .unwrap();
    assert_eq!(
        event_line(&n, &out()).unwrap(),
        "2026-11-30T09:12:03Z  -  refused  1008 invalid_token  session_claim: field `token`: \
         must be the unpadded base64url of the link's 32 token bytes (43 characters)\n"
    );
    let n: EventNotification = serde_json::from_value(json!({"kind": "device_refused",
        "sessionId": "q3V", "alias": "pixel-8", "ts": 1796029923120u64, "seq": 0,
        "data": {"transport": "web", "code": 1008, "reason": "invalid_json",
                 "problem": "the message is not JSON (line 1, column 2)\u{1b}[2J", "suppressed": 4}}))
    .unwrap();
    assert_eq!(
        event_line(&n, &out()).unwrap(),
        "2026-11-30T09:12:03Z  pixel-8  refused  1008 invalid_json  the message is not JSON \
         (line 1, column 2)[2J (4 more not reported)\n"
    );
}

#[test]
fn events_since_note() {
    let n = app_event(json!({"name": "e", "payload": null, "ts": 1}));
    let r = EventsSinceResult::new(vec![n], 42, 2, 5);
    let s = events_since(&r, Some("pixel-8"), &out());
    assert_eq!(
        s.human,
        "2026-11-30T09:12:03Z  pixel-8  e  null\ncursor 42 · dropped 2 · remaining 5 — next: appduct events since pixel-8 42\n2 events were evicted before they were read.\n5 more; run the next command to continue.\n"
    );
    assert_eq!(s.data["cursor"], 42);
    let r = EventsSinceResult::new(vec![], 0, 0, 0);
    assert_eq!(
        events_since(&r, None, &out()).human,
        "cursor 0 · dropped 0 · remaining 0 — next: appduct events since 0\n"
    );
}

#[test]
fn events_ls_rendering() {
    let r: EventsListResult = serde_json::from_value(json!({"events": [
            {"name": "checkout_completed", "description": "Sent after payment.", "payload_schema": {"type": "object", "properties": {"orderId": {"type": "string"}}, "required": ["orderId"]}}
        ], "total": 2, "hasMore": true, "offset": 0})).unwrap();
    let s = events_ls(&r, "pixel-8", Some("checkout_completed"), Some(1), None);
    assert!(s.human.starts_with("Events on pixel-8\n  checkout_completed { orderId: string }\n    Sent after payment.\n  Payload schema:\n    {\n"), "{}", s.human);
    assert!(s.human.ends_with("\nShowing 1 of 2 events (offset 0). Narrow with --name <glob>, or page with --offset 1.\n"), "{}", s.human);
    assert_eq!(s.data["name"], "checkout_completed");
    assert!(s.data.get("offset").is_none());
    let empty: EventsListResult =
        serde_json::from_value(json!({"events": [], "total": 0, "hasMore": false, "offset": 0}))
            .unwrap();
    assert_eq!(
        events_ls(&empty, "p", None, None, None).human,
        "No events declared on p.\n"
    );
    assert_eq!(
        events_ls(&empty, "p", Some("x*"), None, None).human,
        "No events match \"x*\" on p.\n"
    );
}

fn status() -> StatusResult {
    serde_json::from_value(json!({
            "version": "0.3.1", "controlProtocol": 1, "pid": 48211, "startedAt": "2026-11-30T09:12:03.120Z",
            "stateDir": "/home/ana/.appduct", "wssPort": 8443, "webPort": 53120,
            "advertisedAddress": {"address": "192.168.1.20", "family": 4, "source": "detected"},
            "pinnedKeys": ["sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="],
            "sessions": [], "pendingLinks": 0, "pendingCalls": 0,
            "policy": {"default": "allow", "destructive": "prompt", "tools": {"pixel-8/reset_counter": "deny"}},
            "audit": {"path": "/home/ana/.appduct/audit", "failedWrites": 0, "failedPrunes": 0, "retentionDays": 30, "files": 3, "bytes": 18234},
            "eventsLog": {"path": "/home/ana/.appduct/events.log", "failedWrites": 0}
        }))
        .unwrap()
}

#[test]
fn daemon_status_matches_the_spec_layout() {
    let s = daemon_status(&status(), None, datetime!(2026-11-30 11:12:04 UTC));
    let expected = "\
Daemon
  Version:        0.3.1
  PID:            48211
  Started:        2026-11-30T09:12:03Z (2h ago)
  State dir:      /home/ana/.appduct
  WSS port:       8443
  Web port:       53120
  Address:        192.168.1.20 (detected)
  Pin:            sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=
  Sessions:       0
  Pending links:  0
  Pending calls:  0
Policy
  Default:        allow
  Destructive:    prompt
  Override:       pixel-8/reset_counter = deny
Audit
  Path:           /home/ana/.appduct/audit
  Retention:      30 days
  Files:          3 (17.8 KiB)
  Failed writes:  0
  Failed prunes:  0
Events log
  Path:           /home/ana/.appduct/events.log
  Failed writes:  0
";
    assert_eq!(s.human, expected);
    assert_eq!(s.data["daemon"]["sessionCount"], 0);
    assert!(s.data["daemon"].get("sessions").is_none());
    assert_eq!(s.data["audit"]["files"], 3);
    assert!(s.data.get("warning").is_none());
}

#[test]
fn daemon_status_lists_operator_grants() {
    let mut st = status();
    st.grants = vec![
        serde_json::from_value(json!({"grantId": "grt_Hc0mV1bq8Zr2YkLw9Tn4Xa",
            "sessionId": "Yk3wL0pQz7sX2nVa", "alias": "pixel-8", "tool": "empty_cart",
            "approvalId": "apr_3q2-7wEYhZr0kDx1uVb8Ag", "createdAt": "2026-11-30T11:00:00.000Z",
            "expiresAt": 1796083200, "by": {"client": "appduct", "pid": 7}}))
        .unwrap(),
    ];
    let s = daemon_status(&st, None, now());
    assert!(
        s.human
            .contains("Grant:          grt_Hc0mV1bq8Zr2YkLw9Tn4Xa empty_cart on pixel-8 until "),
        "{}",
        s.human
    );
    assert_eq!(s.data["grants"][0]["tool"], "empty_cart");
    assert!(
        daemon_status(&status(), None, now())
            .data
            .get("grants")
            .is_none()
    );
}

#[test]
fn daemon_status_omits_unreported_fields_and_shows_warnings() {
    let mut st = status();
    st.audit.files = None;
    st.audit.bytes = None;
    let s = daemon_status(&st, Some("daemon 0.3.0 is older than appduct 0.3.1"), now());
    assert!(!s.human.contains("Files:"));
    assert!(s.data["audit"].get("files").is_none());
    assert!(
        s.human
            .ends_with("Warning: daemon 0.3.0 is older than appduct 0.3.1\n")
    );
    assert_eq!(
        s.data["warning"],
        "daemon 0.3.0 is older than appduct 0.3.1"
    );
}

#[test]
fn daemon_start_stop_run() {
    let s = daemon_start(&status(), true);
    assert_eq!(s.human, "Daemon started (pid 48211, wss port 8443).\n");
    assert_eq!(s.data["daemon"]["spawned"], true);
    assert_eq!(
        daemon_start(&status(), false).human,
        "Daemon already running (pid 48211, wss port 8443).\n"
    );
    let s = daemon_stop(48211, StopMethod::Sigterm);
    assert_eq!(
        s.data,
        json!({"daemon": {"ok": true, "method": "sigterm", "pid": 48211}})
    );
    assert_eq!(s.human, "Daemon stopped (pid 48211).\n");
    let s = daemon_running(
        48211,
        "0.3.1",
        "/home/ana/.appduct",
        "/home/ana/.appduct/daemon.sock",
    );
    assert_eq!(
        s.data.to_string(),
        r#"{"daemon":{"pid":48211,"version":"0.3.1","stateDir":"/home/ana/.appduct","socketPath":"/home/ana/.appduct/daemon.sock"}}"#
    );
    assert_eq!(
        s.human,
        "Daemon running (pid 48211, state dir /home/ana/.appduct). Press Ctrl-C to stop.\n"
    );
}

#[test]
fn human_limit_default() {
    assert_eq!(effective_limit(None, false), Some(50));
    assert_eq!(effective_limit(None, true), None);
    assert_eq!(effective_limit(Some(3), true), Some(3));
}

// SECURITY.md §4.13: app-supplied strings reach human output without control characters.

const HOSTILE: &str = "x\u{1b}]0;t\u{7} \u{1b}[2J \u{9b}2J\u{7f}";

/// No control character but the line breaks of the layout.
fn assert_clean(text: &str) {
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
}

#[test]
fn tool_results_print_with_control_characters_escaped() {
    let r: ToolsCallResult = serde_json::from_value(json!({"result": {"text": HOSTILE}, "callId": "cli-1", "sessionId": "q3V", "alias": "pixel\u{9b}-8", "durationMs": 41})).unwrap();
    let s = tools_call("evil", &r);
    assert_clean(&s.human);
    assert!(
        s.human.starts_with("Result (evil on pixel-8, 41 ms)\n"),
        "{}",
        s.human
    );
    assert!(s.human.contains(r"\u009b2J\u007f"), "{}", s.human);
    assert_eq!(s.data, json!({"text": HOSTILE}));
}

#[test]
fn describe_and_ls_clean_descriptions_groups_annotations_and_schemas() {
    let e = entry(json!({
        "name": "evil", "description": format!("{HOSTILE}\nline two"),
        "input_schema": {"type": "object", "properties": {HOSTILE: {"type": "string"}}},
        "annotations": {"title": HOSTILE},
        "group": format!("g{HOSTILE}"), "policy": "allow"
    }));
    let s = tools_describe(&e);
    assert_clean(&s.human);
    assert!(s.human.contains("x]0;t [2J 2J\n"), "{}", s.human);
    assert!(s.human.contains("title=x]0;t [2J 2J"), "{}", s.human);
    assert_eq!(s.data["signature"], json!(tool_signature(&e)));
    let result = list(
        vec![to_value(&e)],
        1,
        false,
        0,
        json!([{"group": format!("g{HOSTILE}"), "total": 1}]),
    );
    for full in [false, true] {
        let mut req = ls_req(ToolsListParams::default());
        req.full = full;
        assert_clean(&tools_ls(&req, &result, "pixel\u{1b}-8").human);
    }
    let mut req = ls_req(ToolsListParams::default());
    req.groups_only = true;
    assert_clean(&tools_ls(&req, &result, "pixel-8").human);
}

#[test]
fn event_lines_and_lists_clean_alias_name_payload_and_preview() {
    let mut n =
        app_event(json!({"name": format!("e{HOSTILE}"), "payload": {"x": HOSTILE}, "ts": 1}));
    n.alias = Some(format!("pixel{HOSTILE}"));
    for o in [
        out(),
        Output::plain(OutputFlags {
            pretty: true,
            ..OutputFlags::default()
        }),
    ] {
        let line = event_line(&n, &o).unwrap();
        assert_clean(&line);
        assert!(line.contains(r"\u001b[2J \u009b2J"), "{line}");
    }
    let n = app_event(
        json!({"name": "big", "payloadPreview": format!("{{\"x\":\"{HOSTILE}"), "truncated": true, "payloadBytes": 9000, "ts": 1}),
    );
    let line = event_line(&n, &out()).unwrap();
    assert_clean(&line);
    assert!(line.contains(r"\u009b2J\u007f… (9000 bytes"), "{line}");
    let r: EventsListResult = serde_json::from_value(json!({"events": [
            {"name": "e", "description": HOSTILE, "payload_schema": {"type": "object", "properties": {HOSTILE: {"type": "string"}}}}
        ], "total": 1, "hasMore": false, "offset": 0})).unwrap();
    assert_clean(&events_ls(&r, "pixel\u{9b}-8", Some("e"), None, None).human);
    assert_clean(&events_tail_notice(Some(HOSTILE)));
}

#[test]
fn sessions_table_and_revoke_clean_aliases_and_device_fields() {
    let s = session(
        "pixel\u{9b}-8",
        json!({"device": {"manufacturer": HOSTILE, "model": "Pixel\u{7}8", "os": HOSTILE}}),
    );
    let table = sessions_ls(&[s], now()).human;
    assert_clean(&table);
    assert!(table.contains("pixel-8"), "{table}");
    assert!(table.contains("Pixel8 (x]0;t [2J 2J)"), "{table}");
    let r: RevokeResult = serde_json::from_value(
        json!({"ok": true, "sessionId": "q3V", "alias": HOSTILE, "revoked": "session"}),
    )
    .unwrap();
    assert_clean(&sessions_revoke(&r).human);
}

#[test]
fn sessions_table_fits_a_terminal_width_by_display_width() {
    let sessions = vec![
        session(
            "pixel-8",
            json!({"device": {"manufacturer": "Google", "model": "Pixel 8", "os": "Android 15"}}),
        ),
        session(
            "huawei-1",
            json!({"device": {"manufacturer": "华为", "model": "Mate 60 Pro 📱", "os": "HarmonyOS 4"}}),
        ),
    ];
    let wide = sessions_ls(&sessions, now()).human;
    assert!(
        wide.lines().any(|l| crate::render::display_width(l) > 60),
        "{wide}"
    );
    let cut = sessions_ls_within(&sessions, now(), Some(60)).human;
    for line in cut.lines() {
        assert!(crate::render::display_width(line) <= 60, "{line}\n{cut}");
    }
    assert!(cut.contains('…'), "{cut}");
    assert!(cut.starts_with("ALIAS"), "{cut}");
    // A terminal wide enough, or none: the table is the same as on a pipe.
    assert_eq!(sessions_ls_within(&sessions, now(), Some(500)).human, wide);
    assert_eq!(sessions_ls_within(&sessions, now(), None).human, wide);
}
