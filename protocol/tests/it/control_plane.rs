//! Control-plane types against docs/protocol/control.md: params validation of every method (§C5,
//! §C8), JSON examples as exact round trips, and the framing / classification rules of
//! §C2–§C3.1 driven end to end through `LineBuffer` and `parse_incoming`.

use std::fmt::Debug;

use appduct_protocol::control::*;
use appduct_protocol::errors::{ErrorType, ToolErrorType};
use appduct_protocol::frames::{AppFrame, Phase, decode_app_message};
use appduct_protocol::glob::Glob;
use appduct_protocol::jsonrpc::{
    ErrorObject, Incoming, LineBuffer, MessageError, Notification, Overflow, RequestId, Response,
    ServerMessage, parse_incoming, parse_server_message, to_line,
};
use appduct_protocol::limits;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The example with whitespace removed and key order kept.
fn compact(example: &str) -> String {
    let v: Value = serde_json::from_str(example).unwrap_or_else(|e| panic!("{e}: {example}"));
    serde_json::to_string(&v).unwrap_or_default()
}

/// Decodes the example into `T` and checks that it serialises back to the same bytes.
fn round_trip<T: Serialize + DeserializeOwned + Debug>(example: &str) -> T {
    let typed: T = serde_json::from_str(example).unwrap_or_else(|e| panic!("{e}: {example}"));
    assert_eq!(
        serde_json::to_string(&typed).unwrap_or_default(),
        compact(example)
    );
    typed
}

fn valid<M: Method>(params: Value) -> M::Params {
    let p = if params.is_null() {
        None
    } else {
        Some(&params)
    };
    M::validate(p).unwrap_or_else(|e| panic!("{} {params}: {e}", M::NAME))
}

/// Asserts the params fail and that the error names `param` in the message and details.
fn invalid<M: Method>(params: Value, param: &str) -> ErrorObject {
    match M::validate(Some(&params)) {
        Ok(p) => panic!("{} {params}: accepted as {p:?}", M::NAME),
        Err(e) => {
            assert_eq!(e.param(), Some(param), "{} {params}: {e}", M::NAME);
            assert!(
                e.message().contains(&format!("\"{param}\"")),
                "{}: message {:?} does not name {param}",
                M::NAME,
                e.message()
            );
            let obj = ErrorObject::from(e);
            assert_eq!(obj.code, -32602);
            assert_eq!(obj.error_type(), ErrorType::InvalidRequest);
            assert_eq!(
                obj.details().and_then(|d| d.get("param")),
                Some(&json!(param))
            );
            obj
        }
    }
}

// ------------------------------------------------------------------------------------------
// Params, one block per method
// ------------------------------------------------------------------------------------------

#[test]
fn daemon_hello_params() {
    let p = valid::<DaemonHello>(json!({
        "client": {"name": "appduct-cli", "version": "0.3.1"}, "controlProtocol": 1
    }));
    assert_eq!(p.client.map(|c| c.name), Some("appduct-cli".to_owned()));
    assert_eq!(p.control_protocol, Some(1));
    assert_eq!(valid::<DaemonHello>(json!(null)), HelloParams::default());
    assert_eq!(
        valid::<DaemonHello>(json!({"controlProtocol": 2.0})).control_protocol,
        Some(2)
    );

    invalid::<DaemonHello>(json!({"controlProtocol": 0}), "controlProtocol");
    invalid::<DaemonHello>(json!({"controlProtocol": 1.5}), "controlProtocol");
    invalid::<DaemonHello>(json!({"client": {"name": ""}}), "client.name");
    invalid::<DaemonHello>(
        json!({"client": {"name": "x", "version": "v".repeat(65)}}),
        "client.version",
    );
    invalid::<DaemonHello>(json!({"client": {"name": "x"}}), "client.version");
    invalid::<DaemonHello>(json!({"client": "appduct-cli"}), "client");
    let e = invalid::<DaemonHello>(
        json!({"client": {"name": "x", "version": "1", "pid": 3}}),
        "client.pid",
    );
    let details = e.details().cloned().unwrap_or_default();
    assert_eq!(details["unknownKeys"], json!(["pid"]));
    assert_eq!(details["acceptedKeys"], json!(["name", "version"]));
}

#[test]
fn no_param_methods_accept_only_empty_objects() {
    assert_eq!(valid::<DaemonStatus>(json!({})), NoParams {});
    assert_eq!(valid::<DaemonShutdown>(json!(null)), NoParams {});
    assert_eq!(valid::<SessionsList>(json!({})), NoParams {});
    for (name, r) in [
        (
            "daemon.status",
            DaemonStatus::validate(Some(&json!({"verbose": true}))),
        ),
        (
            "daemon.shutdown",
            DaemonShutdown::validate(Some(&json!({"force": 1}))),
        ),
        (
            "sessions.list",
            SessionsList::validate(Some(&json!({"selector": "x"}))),
        ),
    ] {
        let e = r.err().unwrap_or_else(|| panic!("{name} accepted a key"));
        assert_eq!(e.details()["acceptedKeys"], json!([]), "{name}");
    }
    invalid::<SessionsList>(json!([]), "params");
}

#[test]
fn link_create_params() {
    let p = valid::<LinkCreate>(json!({"ttlSeconds": 86400, "addressOverride": "::1"}));
    assert_eq!(p.ttl_seconds, Some(86_400));
    assert_eq!(p.address_override.map(|a| a.is_ipv6()), Some(true));
    assert_eq!(p.transport(), Transport::Native);
    let p = valid::<LinkCreate>(json!({"transport": "web", "ttlSeconds": 1}));
    assert_eq!(p.transport(), Transport::Web);
    assert_eq!(
        valid::<LinkCreate>(json!({"addressOverride": "192.168.1.20", "transport": "native"}))
            .address_override
            .map(|a| a.to_string()),
        Some("192.168.1.20".to_owned())
    );

    invalid::<LinkCreate>(json!({"ttlSeconds": 0}), "ttlSeconds");
    invalid::<LinkCreate>(json!({"ttlSeconds": 86401}), "ttlSeconds");
    invalid::<LinkCreate>(json!({"ttlSeconds": "60"}), "ttlSeconds");
    invalid::<LinkCreate>(json!({"addressOverride": "example.com"}), "addressOverride");
    invalid::<LinkCreate>(json!({"addressOverride": "[::1]"}), "addressOverride");
    invalid::<LinkCreate>(
        json!({"addressOverride": "10.0.0.2", "transport": "web"}),
        "addressOverride",
    );
    invalid::<LinkCreate>(json!({"transport": "wss"}), "transport");
}

#[test]
fn consent_create_params() {
    let sha = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
    let p = valid::<ConsentCreate>(json!({
        "sessionId": "q3VfZ0xkR2ptTnB4", "name": "reset_counter", "argsSha256": sha,
        "selector": "pixel-8", "timeoutMs": 5000, "ttlMs": 600000
    }));
    assert_eq!(p.ttl_ms(), 600_000);
    assert_eq!(
        serde_json::to_value(p.record()).ok(),
        Some(
            json!({"sessionId": "q3VfZ0xkR2ptTnB4", "name": "reset_counter",
                    "argsSha256": sha, "selector": "pixel-8", "timeoutMs": 5000})
        )
    );
    let p = valid::<ConsentCreate>(json!({"sessionId": "s", "name": "n", "argsSha256": sha}));
    assert_eq!(p.ttl_ms(), limits::DEFAULT_CONSENT_TTL_MS);
    assert_eq!(
        serde_json::to_value(p.record()).ok(),
        Some(json!({"sessionId": "s", "name": "n", "argsSha256": sha}))
    );

    // Any string is an id to look up; the daemon answers `unknown_session` for one that names
    // no live session, the empty string and overlong ones included.
    for id in [String::new(), "s".repeat(300), "not an id!".to_owned()] {
        let p = valid::<ConsentCreate>(json!({"sessionId": id, "name": "n", "argsSha256": sha}));
        assert_eq!(p.session_id, id);
    }
    invalid::<ConsentCreate>(json!({"name": "n", "argsSha256": sha}), "sessionId");
    invalid::<ConsentCreate>(
        json!({"sessionId": 7, "name": "n", "argsSha256": sha}),
        "sessionId",
    );
    invalid::<ConsentCreate>(json!({"sessionId": "s", "argsSha256": sha}), "name");
    invalid::<ConsentCreate>(
        json!({"sessionId": "s", "name": "n".repeat(65), "argsSha256": sha}),
        "name",
    );
    invalid::<ConsentCreate>(
        json!({"sessionId": "s", "name": "n", "argsSha256": sha.to_uppercase()}),
        "argsSha256",
    );
    invalid::<ConsentCreate>(
        json!({"sessionId": "s", "name": "n", "argsSha256": sha, "timeoutMs": 999}),
        "timeoutMs",
    );
    invalid::<ConsentCreate>(
        json!({"sessionId": "s", "name": "n", "argsSha256": sha, "ttlMs": 600001}),
        "ttlMs",
    );
    invalid::<ConsentCreate>(
        json!({"sessionId": "s", "name": "n", "argsSha256": sha, "selector": ""}),
        "selector",
    );
}

#[test]
fn consent_take_params() {
    let handle = "cr_7hV0k1lX4dZ8Qm2sN6pR9tB3wY5cE1aF0gH2jK4mL6o";
    assert_eq!(
        valid::<ConsentTake>(json!({"handle": handle})).handle,
        handle
    );
    invalid::<ConsentTake>(json!({}), "handle");
    invalid::<ConsentTake>(json!({"handle": ""}), "handle");
    invalid::<ConsentTake>(json!({"handle": "h".repeat(129)}), "handle");
    invalid::<ConsentTake>(json!({"handle": 7}), "handle");
}

#[test]
fn selector_rules_for_describe_and_revoke() {
    assert_eq!(
        valid::<SessionsDescribe>(json!({"selector": "pixel-8"})).selector,
        Some("pixel-8".to_owned())
    );
    assert_eq!(valid::<SessionsRevoke>(json!({})).selector, None);
    // 128 characters, counted in scalar values, not bytes.
    let long = "é".repeat(128);
    assert_eq!(
        valid::<SessionsRevoke>(json!({ "selector": long })).selector,
        Some(long)
    );
    invalid::<SessionsDescribe>(json!({"selector": ""}), "selector");
    invalid::<SessionsDescribe>(json!({"selector": "x".repeat(129)}), "selector");
    invalid::<SessionsRevoke>(json!({"selector": 5}), "selector");
    invalid::<SessionsRevoke>(json!({"session": "pixel-8"}), "session");
}

#[test]
fn tools_list_params() {
    let p = valid::<ToolsList>(json!({
        "selector": "pixel-8", "group": "checkout/payment", "filter": "Cart", "limit": 2,
        "offset": 0
    }));
    assert_eq!(p.group.as_deref(), Some("checkout/payment"));
    assert_eq!(p.filter.as_deref(), Some("Cart"));
    assert_eq!((p.limit, p.offset), (Some(2), Some(0)));
    // An empty filter equals absent.
    assert_eq!(valid::<ToolsList>(json!({"filter": ""})).filter, None);
    assert_eq!(
        valid::<ToolsList>(json!({"filter": "f".repeat(256)}))
            .filter
            .map(|f| f.len()),
        Some(256)
    );

    invalid::<ToolsList>(json!({"group": "a/b/c"}), "group");
    invalid::<ToolsList>(json!({"group": "bad group"}), "group");
    invalid::<ToolsList>(json!({"group": ""}), "group");
    invalid::<ToolsList>(json!({"filter": "f".repeat(257)}), "filter");
    invalid::<ToolsList>(json!({"limit": 0}), "limit");
    invalid::<ToolsList>(json!({"limit": 2.5}), "limit");
    invalid::<ToolsList>(json!({"offset": -1}), "offset");
    invalid::<ToolsList>(json!({"page": 1}), "page");
}

#[test]
fn tools_call_params() {
    let p = valid::<ToolsCall>(json!({
        "selector": "q3VfZ0xkR2ptTnB4", "name": "slow_task", "args": {"b": 1, "a": 2},
        "timeoutMs": 1500.7, "caller": "mcp", "consent": "elicitation",
        "callId": "mcp_Q2n7VbX0sLk4Tz9Rw1pHcA", "progress": true
    }));
    assert_eq!(p.timeout_ms, Some(1500));
    assert_eq!(p.caller(), Caller::Mcp);
    assert_eq!(p.consent, Some(Consent::Elicitation));
    assert!(p.progress);
    // Argument key order is kept as received.
    assert_eq!(
        serde_json::to_string(&p.args).unwrap_or_default(),
        r#"{"b":1,"a":2}"#
    );

    let p = valid::<ToolsCall>(json!({"name": "sum", "consent": "client", "args": null}));
    assert_eq!(
        p.consent, None,
        "legacy consent \"client\" is treated as absent"
    );
    assert!(p.args.is_empty());
    assert_eq!(p.caller(), Caller::Cli);
    assert!(!p.progress);
    assert_eq!(p.timeout_ms, None);
    // Clamped, never rejected.
    assert_eq!(
        valid::<ToolsCall>(json!({"name": "x", "timeoutMs": 999})).timeout_ms,
        Some(1000)
    );
    assert_eq!(
        valid::<ToolsCall>(json!({"name": "x", "timeoutMs": 600001})).timeout_ms,
        Some(600_000)
    );

    invalid::<ToolsCall>(json!({}), "name");
    invalid::<ToolsCall>(json!({"name": ""}), "name");
    invalid::<ToolsCall>(json!({"name": "n".repeat(65)}), "name");
    invalid::<ToolsCall>(json!({"name": "x", "args": [1]}), "args");
    invalid::<ToolsCall>(json!({"name": "x", "args": "{}"}), "args");
    invalid::<ToolsCall>(json!({"name": "x", "timeoutMs": "5000"}), "timeoutMs");
    invalid::<ToolsCall>(json!({"name": "x", "caller": "cron"}), "caller");
    invalid::<ToolsCall>(json!({"name": "x", "consent": "yes"}), "consent");
    invalid::<ToolsCall>(json!({"name": "x", "consent": true}), "consent");
    invalid::<ToolsCall>(json!({"name": "x", "callId": "a b"}), "callId");
    invalid::<ToolsCall>(json!({"name": "x", "callId": "c".repeat(129)}), "callId");
    invalid::<ToolsCall>(json!({"name": "x", "progress": "true"}), "progress");
    invalid::<ToolsCall>(json!({"name": "x", "timeout": 5}), "timeout");
}

#[test]
fn tools_call_args_cap_is_on_compact_bytes() {
    // {"k":"<filler>"} is 8 bytes of framing around the filler.
    let fits = "a".repeat(limits::MAX_ARGS_BYTES - 8);
    let p = valid::<ToolsCall>(json!({"name": "x", "args": {"k": fits}}));
    assert_eq!(
        compact_json_len(&Value::Object(p.args)),
        limits::MAX_ARGS_BYTES
    );

    let over = "a".repeat(limits::MAX_ARGS_BYTES - 7);
    let e = invalid::<ToolsCall>(json!({"name": "x", "args": {"k": over}}), "args");
    assert_eq!(
        e.details().and_then(|d| d.get("maxArgsBytes").cloned()),
        Some(json!(261_120))
    );
}

/// `n` nested arrays around `1`.
fn nested(n: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..n {
        v = Value::Array(vec![v]);
    }
    v
}

#[test]
fn tools_call_args_nest_at_most_max_json_depth_levels() {
    // `args` itself is level 1.
    let at_cap = json!({"k": nested(limits::MAX_JSON_DEPTH - 1)});
    let p = valid::<ToolsCall>(json!({"name": "x", "args": at_cap}));
    assert_eq!(Value::Object(p.args), at_cap);

    for depth in [limits::MAX_JSON_DEPTH, 120] {
        let e = invalid::<ToolsCall>(json!({"name": "x", "args": {"k": nested(depth)}}), "args");
        assert_eq!(
            e.details().and_then(|d| d.get("maxDepth").cloned()),
            Some(json!(64))
        );
    }
}

#[test]
fn app_values_at_the_depth_cap_reach_clients_intact() {
    const SID: &str = "q3VfZ0xkR2ptTnB4";
    let acked = Phase::Acked { session_id: SID };
    let value = nested(limits::MAX_JSON_DEPTH);

    // A tool result at the cap passes the frame guard...
    let frame = json!({"type": "tool_result", "session_id": SID, "id": "c", "result": value});
    let Ok(AppFrame::ToolResult(result)) = decode_app_message(&frame.to_string(), acked) else {
        panic!("the frame guard refused a result at the cap");
    };
    // ...and the daemon's response line carrying it parses on the client side.
    let call = ToolsCallResult::new(result.result, "a", SID, "pixel-8", 1);
    let response = Response::success(
        RequestId::Number(1),
        serde_json::to_value(&call).unwrap_or_default(),
    );
    let line = to_line(&response).unwrap_or_default();
    match parse_server_message(&line) {
        Ok(ServerMessage::Response(Response { outcome: Ok(r), .. })) => {
            let back: ToolsCallResult = serde_json::from_value(r).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, call);
        }
        other => panic!("{other:?}"),
    }

    // The same for an app event payload read back through `events.since`, the deepest
    // envelope the daemon writes around an app value.
    let frame = json!({"type": "event", "session_id": SID, "name": "e", "payload": value, "ts": 1});
    let Ok(AppFrame::Event(event)) = decode_app_message(&frame.to_string(), acked) else {
        panic!("the frame guard refused a payload at the cap");
    };
    let since = json!({"events": [{"kind": "app_event", "sessionId": SID, "alias": "pixel-8",
        "ts": 2, "seq": 1, "data": {"name": "e", "payload": event.payload.unwrap_or_default(), "ts": 1}}],
        "cursor": 1, "dropped": 0, "remaining": 0});
    let line = to_line(&Response::success(RequestId::Number(2), since)).unwrap_or_default();
    match parse_server_message(&line) {
        Ok(ServerMessage::Response(Response { outcome: Ok(r), .. })) => {
            let back: EventsSinceResult =
                serde_json::from_value(r).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.events.len(), 1);
        }
        other => panic!("{other:?}"),
    }

    // And tool error details, one level down inside `error`.
    let frame = json!({"type": "tool_error", "session_id": SID, "id": "c",
        "error": {"type": "tool_execution_error", "message": "m", "details": nested(limits::MAX_JSON_DEPTH - 1)}});
    let Ok(AppFrame::ToolError(error)) = decode_app_message(&frame.to_string(), acked) else {
        panic!("the frame guard refused details at the cap");
    };
    let e =
        ErrorObject::app_tool_error(ToolErrorType::ToolExecutionError, "m", error.error.details);
    let line = to_line(&Response::error(Some(RequestId::Number(3)), e)).unwrap_or_default();
    assert!(matches!(
        parse_server_message(&line),
        Ok(ServerMessage::Response(Response {
            outcome: Err(_),
            ..
        }))
    ));
}

#[test]
fn values_the_guard_refuses_are_those_clients_could_not_read() {
    // Why the cap exists: a result nested 126 deep fits serde_json's limit inside a frame but
    // not inside the response line around it.
    let deep = nested(126);
    let frame = json!({"type": "tool_result", "session_id": "s", "id": "c", "result": deep});
    assert!(decode_app_message(&frame.to_string(), Phase::Acked { session_id: "s" }).is_err());
    let response = Response::success(
        RequestId::Number(1),
        json!({"result": frame["result"], "callId": "a", "sessionId": "s", "alias": "a", "durationMs": 1}),
    );
    let line = to_line(&response).unwrap_or_default();
    assert!(matches!(
        parse_server_message(&line),
        Err(MessageError::Json(_))
    ));
}

#[test]
fn glob_params_and_glob_new_count_length_alike() {
    // 2,048 astral characters and a `*`: 2,049 characters, 4,097 UTF-16 units.
    let name = format!("{}*", "😀".repeat(2_048));
    let p = valid::<EventsList>(json!({"name": name}));
    assert_eq!(p.name.as_deref(), Some(name.as_str()));
    assert!(Glob::new(&name).is_ok());
    let p = valid::<EventsSince>(json!({"name": "😀".repeat(4_096)}));
    assert!(Glob::new(p.name.as_deref().unwrap_or_default()).is_ok());
    let too_long = "😀".repeat(4_097);
    invalid::<EventsList>(json!({"name": too_long}), "name");
    assert!(Glob::new(&too_long).is_err());
}

#[test]
fn secrets_never_reach_debug_output() {
    const PAYLOAD: &str = "AgTAqAEUIPsQWmszcFEwbVg4c0wxdkIybjSECRET";
    const HANDLE: &str = "cr_7hV0k1lX4dZ8Qm2sN6pR9tB3wY5cE1aF0gH2jK4mL6o";
    let link = LinkCreateResult::new(
        "Zk3pQ0mX8sL1vB2n",
        Transport::Native,
        PAYLOAD,
        Endpoint::new("192.168.1.20", 8443, 4),
        1_764_494_223,
        "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
    );
    let text = format!("{link:?} {link:#?}");
    assert!(!text.contains("SECRET"), "{text}");
    assert!(
        text.contains("<redacted>") && text.contains("Zk3pQ0mX8sL1vB2n"),
        "{text}"
    );

    let created = ConsentCreateResult::new(HANDLE, 1);
    let take = ConsentTakeParams::new(HANDLE);
    let request = ControlRequest::ConsentTake(take.clone());
    for text in [
        format!("{created:?}"),
        format!("{take:?}"),
        format!("{request:?}"),
    ] {
        assert!(!text.contains("7hV0k1lX"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
    // Serialisation is untouched: the wire still carries the secrets.
    assert_eq!(
        serde_json::to_value(&take).unwrap_or_default()["handle"],
        json!(HANDLE)
    );
}

#[test]
fn tools_cancel_params() {
    let p = valid::<ToolsCancel>(json!({"callId": "b", "reason": "mcp_client_cancelled"}));
    assert_eq!(p.reason(), "mcp_client_cancelled");
    let p = valid::<ToolsCancel>(json!({"callId": "b", "selector": "pixel-8"}));
    assert_eq!(p.reason(), DEFAULT_CANCEL_REASON);

    invalid::<ToolsCancel>(json!({}), "callId");
    invalid::<ToolsCancel>(json!({"callId": ""}), "callId");
    invalid::<ToolsCancel>(json!({"callId": "b", "reason": "User Cancelled"}), "reason");
    invalid::<ToolsCancel>(json!({"callId": "b", "reason": ""}), "reason");
    invalid::<ToolsCancel>(json!({"callId": "b", "reason": "r".repeat(65)}), "reason");
    invalid::<ToolsCancel>(json!({"callId": "b", "selector": ""}), "selector");
}

#[test]
fn events_list_params() {
    let p = valid::<EventsList>(json!({"name": "*_failed", "limit": 10, "offset": 5}));
    assert_eq!(p.name.as_deref(), Some("*_failed"));
    assert_eq!(
        valid::<EventsList>(json!({"name": "g".repeat(4096)}))
            .name
            .map(|n| n.len()),
        Some(4096)
    );
    invalid::<EventsList>(json!({"name": ""}), "name");
    invalid::<EventsList>(json!({"name": "g".repeat(4097)}), "name");
    invalid::<EventsList>(json!({"limit": 0}), "limit");
    invalid::<EventsList>(json!({"offset": "1"}), "offset");
}

#[test]
fn events_subscribe_params() {
    let p = valid::<EventsSubscribe>(json!({
        "sessionSelector": "q3VfZ0xkR2ptTnB4", "kinds": ["app_event", "session_revoked"],
        "name": "checkout_*", "payloadMaxBytes": 1024, "since": 0
    }));
    assert_eq!(
        p.kinds,
        Some(vec![EventKind::AppEvent, EventKind::SessionRevoked])
    );
    assert!(p.admits(EventKind::AppEvent));
    assert!(!p.admits(EventKind::ToolsChanged));
    let all = valid::<EventsSubscribe>(json!({}));
    assert!(EventKind::ALL.iter().all(|k| all.admits(*k)));
    // `since` with kinds absent is fine when bound to a session.
    valid::<EventsSubscribe>(json!({"sessionSelector": "pixel-8", "since": 4}));

    invalid::<EventsSubscribe>(json!({"kinds": []}), "kinds");
    invalid::<EventsSubscribe>(json!({"kinds": "app_event"}), "kinds");
    invalid::<EventsSubscribe>(json!({"kinds": ["app_event", "nope"]}), "kinds");
    invalid::<EventsSubscribe>(json!({"kinds": ["app_event", "app_event"]}), "kinds");
    invalid::<EventsSubscribe>(json!({"since": 0}), "since");
    invalid::<EventsSubscribe>(
        json!({"sessionSelector": "pixel-8", "since": 0, "kinds": ["tools_changed"]}),
        "since",
    );
    invalid::<EventsSubscribe>(json!({"sessionSelector": "p", "since": -1}), "since");
    invalid::<EventsSubscribe>(json!({"payloadMaxBytes": 0}), "payloadMaxBytes");
    invalid::<EventsSubscribe>(json!({"name": ""}), "name");
    invalid::<EventsSubscribe>(json!({"sessionSelector": ""}), "sessionSelector");
    invalid::<EventsSubscribe>(json!({"selector": "pixel-8"}), "selector");
}

#[test]
fn events_since_params() {
    let p = valid::<EventsSince>(json!({
        "selector": "pixel-8", "since": 2, "limit": 2, "name": "*", "payloadMaxBytes": 11
    }));
    assert_eq!(
        (p.since, p.limit, p.payload_max_bytes),
        (Some(2), Some(2), Some(11))
    );
    assert_eq!(valid::<EventsSince>(json!({})).since, None);

    invalid::<EventsSince>(json!({"since": -1}), "since");
    invalid::<EventsSince>(json!({"since": 0.5}), "since");
    invalid::<EventsSince>(json!({"limit": 0}), "limit");
    invalid::<EventsSince>(json!({"payloadMaxBytes": 0}), "payloadMaxBytes");
    invalid::<EventsSince>(json!({"cursor": 3}), "cursor");

    let e = ErrorObject::from(ParamError::since_beyond_high_water_mark(12, 9));
    assert_eq!(e.code, -32602);
    let details = e.details().cloned().unwrap_or_default();
    assert_eq!(details["param"], json!("since"));
    assert_eq!(details["highWaterMark"], json!(9));
}

#[test]
fn every_method_has_a_name_and_rejects_non_object_params() {
    let names = [
        DaemonHello::NAME,
        DaemonStatus::NAME,
        DaemonShutdown::NAME,
        LinkCreate::NAME,
        ConsentCreate::NAME,
        ConsentTake::NAME,
        SessionsList::NAME,
        SessionsDescribe::NAME,
        SessionsRevoke::NAME,
        ToolsList::NAME,
        ToolsCall::NAME,
        ToolsCancel::NAME,
        EventsList::NAME,
        EventsSubscribe::NAME,
        EventsSince::NAME,
        ApprovalsList::NAME,
        ApprovalsChallenge::NAME,
        ApprovalsDecide::NAME,
        GrantsList::NAME,
        GrantsRevoke::NAME,
        PolicyList::NAME,
        PolicySet::NAME,
        PolicyReset::NAME,
        DaemonReload::NAME,
        CallsList::NAME,
        SessionsLease::NAME,
        SessionsRelease::NAME,
        ToolsResult::NAME,
    ];
    assert_eq!(names.as_slice(), METHODS);
    for name in METHODS {
        for bad in [json!([1]), json!("x"), json!(3)] {
            let e = ControlRequest::parse(name, Some(&bad)).err();
            assert_eq!(e.map(|e| e.code), Some(-32602), "{name} {bad}");
        }
    }
}

// ------------------------------------------------------------------------------------------
// Results and shared shapes: the examples of 03, byte for byte
// ------------------------------------------------------------------------------------------

const SESSION_EXAMPLE: &str = r#"{"sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","state":"suspended","transport":"native",
 "device":{"manufacturer":"Google","model":"Pixel 8","os":"Android 15"},
 "createdAt":"2026-11-30T09:12:03.120Z","claimedAt":"2026-11-30T09:12:09.842Z",
 "suspendedAt":"2026-11-30T09:40:00.004Z","suspendReason":"app_backgrounded",
 "toolCount":5,"eventCount":1,"registry":"received"}"#;

#[test]
fn session_summary_example() {
    let s: SessionSummary = round_trip(SESSION_EXAMPLE);
    assert_eq!(s.state, SessionState::Suspended);
    assert_eq!(s.suspend_reason, Some(SuspendReason::AppBackgrounded));

    // An active session omits the suspension keys, and an empty device is `{}`.
    let active = SessionSummary {
        state: SessionState::Active,
        suspended_at: None,
        suspend_reason: None,
        device: Device::default(),
        ..s
    };
    let v = serde_json::to_value(&active).unwrap_or_default();
    assert_eq!(v["device"], json!({}));
    assert!(v.get("suspendedAt").is_none() && v.get("suspendReason").is_none());

    // `registry` (issue #23): a summary without it (an older daemon) reads as received.
    let mut old: Value = serde_json::from_str(SESSION_EXAMPLE).unwrap_or_default();
    old.as_object_mut().map(|m| m.remove("registry"));
    let old: SessionSummary = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(old.registry, RegistryState::Received);
    let pending = SessionSummary {
        registry: RegistryState::Pending,
        ..old
    };
    assert_eq!(
        serde_json::to_value(&pending).unwrap_or_default()["registry"],
        "pending"
    );
}

#[test]
fn hello_result_example() {
    let h: HelloResult = round_trip(
        r#"{"version":"0.3.1","controlProtocol":1,"minControlProtocol":1,"pid":48211,
 "startedAt":"2026-11-30T09:12:03.120Z","stateDir":"/home/ana/.appduct",
 "features":["calls.callId","calls.progress","consent.records","events.subscribe.since","events.list","tools.groups","approvals","sessions.lease","calls.results"],
 "sessionCount":1,"pendingLinks":0,"pendingCalls":0}"#,
    );
    assert!(h.is_compatible(limits::CONTROL_PROTOCOL));
    assert!(!h.is_compatible(2));
    assert!(h.has_feature(features::CONSENT_RECORDS));
    assert!(!h.has_feature("web.attach"));
    assert!(!h.is_idle());
    assert_eq!(h.features, features::ALL);
    // Unknown result keys are ignored by clients.
    let newer: Result<HelloResult, _> = serde_json::from_value(json!({
        "version":"0.4.0","controlProtocol":2,"minControlProtocol":1,"pid":1,
        "startedAt":"t","stateDir":"/s","features":["x.y"],"sessionCount":0,
        "pendingLinks":0,"pendingCalls":0,"uptimeMs":5
    }));
    assert!(newer.is_ok_and(|h| h.is_compatible(1) && h.is_idle()));
}

#[test]
fn status_result_example() {
    let s: StatusResult = round_trip(
        r#"{
  "version": "0.3.1", "controlProtocol": 1, "pid": 48211,
  "startedAt": "2026-11-30T09:12:03.120Z", "stateDir": "/home/ana/.appduct",
  "wssPort": 8443, "webPort": 53120,
  "advertisedAddress": {"address": "192.168.1.20", "family": 4, "source": "detected"},
  "pinnedKeys": ["sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="],
  "sessions": [],
  "pendingLinks": 0, "pendingCalls": 0,
  "policy": {"default": "allow", "destructive": "prompt",
             "tools": {"pixel-8/reset_counter": "deny"}},
  "audit": {"path": "/home/ana/.appduct/audit", "failedWrites": 0, "failedPrunes": 0,
            "retentionDays": 30, "files": 3, "bytes": 18234},
  "eventsLog": {"path": "/home/ana/.appduct/events.log", "failedWrites": 0}
}"#,
    );
    // Without overrides `policy.tools` is omitted; unreadable audit dir omits files and bytes.
    let mut bare = s;
    bare.policy.tools.clear();
    bare.audit.files = None;
    bare.audit.bytes = None;
    let v = serde_json::to_value(&bare).unwrap_or_default();
    assert_eq!(
        v["policy"],
        json!({"default": "allow", "destructive": "prompt"})
    );
    assert!(v["audit"].get("files").is_none() && v["audit"].get("bytes").is_none());
}

#[test]
fn shutdown_and_cancel_results() {
    let ok: OkResult = round_trip(r#"{"ok":true}"#);
    assert_eq!(ok, OkResult::default());
    let c: ToolsCancelResult = round_trip(r#"{"cancelled":true}"#);
    assert!(c.cancelled);
    assert!(!round_trip::<ToolsCancelResult>(r#"{"cancelled":false}"#).cancelled);
}

#[test]
fn link_create_result_example() {
    let l: LinkCreateResult = round_trip(
        r#"{"sessionId":"Zk3pQ0mX8sL1vB2n","transport":"native",
 "deepLinkPayload":"AgTAqAEUIPsQWmszcFEwbVg4c0wxdkIybj...",
 "endpoint":{"address":"192.168.1.20","port":8443,"family":4},
 "expiresAt":1764494223,"pin":"sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}"#,
    );
    assert_eq!(l.expires_at, 1_764_494_223);
}

#[test]
fn consent_results() {
    let c: ConsentCreateResult = round_trip(
        r#"{"handle":"cr_7hV0k1lX4dZ8Qm2sN6pR9tB3wY5cE1aF0gH2jK4mL6o","expiresAt":1764494223}"#,
    );
    assert!(c.handle.starts_with("cr_"));
    let r: ConsentRecord = round_trip(
        r#"{"sessionId":"k3J9xQ0vTQm2aB1c","name":"reset_counter","argsSha256":"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}"#,
    );
    assert_eq!((r.selector, r.timeout_ms), (None, None));
}

#[test]
fn revoke_result_examples() {
    // §L3.1 envelope data.
    let r: RevokeResult = round_trip(
        r#"{"ok":true,"sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","revoked":"session"}"#,
    );
    assert_eq!(r.revoked, RevokedKind::Session);
    // A link has no alias: the key is present with null.
    let l: RevokeResult =
        round_trip(r#"{"ok":true,"sessionId":"Zk3pQ0mX8sL1vB2n","alias":null,"revoked":"link"}"#);
    assert_eq!(l.alias, None);
}

#[test]
fn tools_list_result_example() {
    let t: ToolsListResult = round_trip(
        r#"{"tools":[{"name":"add_item","description":"Add an item to the cart.",
  "input_schema":{"type":"object","properties":{"sku":{"type":"string"}},"required":["sku"]},
  "group":"checkout","policy":"allow"}],
 "total":8,"hasMore":true,"offset":0,
 "groups":[{"group":"checkout","total":8},{"group":"checkout/payment","total":3},
           {"group":"counter","total":2},{"group":null,"total":1}]}"#,
    );
    let entry = &t.tools[0];
    assert_eq!(entry.name(), "add_item");
    assert_eq!(entry.group.as_deref(), Some("checkout"));
    assert_eq!(entry.policy, PolicyDecision::Allow);
    assert_eq!(t.groups[3].group, None);
}

#[test]
fn tools_list_entry_keeps_the_descriptor_verbatim() {
    // As the app registered it: group in the middle, schema keys in an unusual order, a stray
    // camelCase key that the device protocol ignores.
    let descriptor = json!({
        "name": "pay", "group": "checkout/payment", "description": "Pay.",
        "input_schema": {"required": ["amount"], "type": "object",
                         "properties": {"amount": {"type": "number", "minimum": 0.5}}},
        "annotations": {"destructiveHint": true}, "timeout_ms": 20000, "timeoutMs": 1
    });
    let Value::Object(map) = descriptor else {
        unreachable!()
    };
    let entry = ToolsListEntry::from_descriptor(&map, PolicyDecision::Prompt);
    assert_eq!(
        serde_json::to_string(&entry).unwrap_or_default(),
        r#"{"name":"pay","description":"Pay.","input_schema":{"required":["amount"],"type":"object","properties":{"amount":{"type":"number","minimum":0.5}}},"annotations":{"destructiveHint":true},"timeout_ms":20000,"group":"checkout/payment","policy":"prompt"}"#
    );

    // Ungrouped: `group` is still present, as null.
    let mut ungrouped = map.clone();
    ungrouped.remove("group");
    let entry = ToolsListEntry::from_descriptor(&ungrouped, PolicyDecision::Allow);
    let v = serde_json::to_value(&entry).unwrap_or_default();
    assert_eq!(v.get("group"), Some(&Value::Null));

    // A client decodes the entry back with the same descriptor fields.
    let back: ToolsListEntry = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, entry);
    assert!(serde_json::from_value::<ToolsListEntry>(json!({"name": "x"})).is_err());
}

#[test]
fn tools_call_result_example() {
    let r: ToolsCallResult = round_trip(
        r#"{"result":{"total":3},"callId":"mcp_Q2n7VbX0sLk4Tz9Rw1pHcA","sessionId":"q3VfZ0xkR2ptTnB4",
 "alias":"pixel-8","durationMs":41}"#,
    );
    assert_eq!(r.result, Some(json!({"total": 3})));
    // A null result is still sent.
    let n: ToolsCallResult = round_trip(
        r#"{"result":null,"callId":"a","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","durationMs":0}"#,
    );
    assert_eq!(n.result, Some(Value::Null));
}

#[test]
fn events_list_result() {
    let r: EventsListResult = round_trip(
        r#"{"events":[{"name":"checkout_completed","description":"Order placed.","payload_schema":{"type":"object"}},
 {"name":"item added","description":"x"}],"total":2,"hasMore":false,"offset":0}"#,
    );
    assert_eq!(r.events[1].payload_schema, None);
}

#[test]
fn subscribe_results() {
    let plain: SubscribeResult = round_trip(r#"{"ok":true}"#);
    assert_eq!((plain.session_id, plain.replay), (None, None));
    let bound: SubscribeResult = round_trip(
        r#"{"ok":true,"sessionId":"q3VfZ0xkR2ptTnB4","replay":{"count":3,"dropped":2,"cursor":9}}"#,
    );
    assert_eq!(bound.replay, Some(Replay::new(3, 2, 9)));
}

const APP_EVENT_EXAMPLE: &str = r#"{"kind":"app_event","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1764493923120,"seq":42,
 "data":{"name":"checkout_completed","payload":{"orderId":"A-17"},"ts":1764493923101}}"#;

#[test]
fn event_notification_example() {
    let e: EventNotification = round_trip(APP_EVENT_EXAMPLE);
    assert_eq!(e.kind(), EventKind::AppEvent);
    assert_eq!(e.seq, 42);
    let EventData::AppEvent(data) = &e.data else {
        panic!("not an app_event")
    };
    assert_eq!(data.name(), "checkout_completed");

    // The same event as the `event` notification line.
    let n = EventNotify::notification(&e).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        String::from_utf8(to_line(&n).unwrap_or_default()).unwrap_or_default(),
        format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{}}}\n",
            compact(APP_EVENT_EXAMPLE)
        )
    );
}

#[test]
fn truncated_app_event_and_events_since_result() {
    // §C13.6: payload {"text":"héllo wörld"} capped at 11 bytes.
    let r: EventsSinceResult = round_trip(
        r#"{"events":[{"kind":"app_event","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1764493923120,"seq":5,
 "data":{"name":"note","payloadPreview":"{\"text\":\"h","truncated":true,"payloadBytes":24,"ts":1764493923101.5}},
 {"kind":"app_event","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1764493923121,"seq":6,
 "data":{"name":"bare","payload":null,"ts":0}}],
 "cursor":6,"dropped":2,"remaining":3}"#,
    );
    assert!(matches!(
        &r.events[0].data,
        EventData::AppEvent(AppEventData::Truncated {
            payload_bytes: 24,
            truncated: true,
            ..
        })
    ));
    assert!(matches!(
        &r.events[1].data,
        EventData::AppEvent(AppEventData::Full {
            payload: Value::Null,
            ..
        })
    ));
}

#[test]
fn every_event_kind_round_trips() {
    let examples = [
        r#"{"kind":"daemon_started","ts":1764493923120,"seq":0,"data":{"version":"0.3.1","pid":48211}}"#,
        r#"{"kind":"link_created","sessionId":"Zk3pQ0mX8sL1vB2n","ts":1,"seq":0,"data":{"expiresAt":1764494223,"transport":"web"}}"#,
        r#"{"kind":"link_expired","sessionId":"Zk3pQ0mX8sL1vB2n","ts":1,"seq":0,"data":{}}"#,
        r#"{"kind":"link_refused","sessionId":"Zk3pQ0mX8sL1vB2n","ts":1,"seq":0,"data":{"reason":"unsupported_link"}}"#,
        r#"{"kind":"device_refused","ts":1,"seq":0,"data":{"transport":"native","code":1008,"reason":"expected_claim_or_resume","frameType":"session_claim","field":"protocol_version","problem":"is missing"}}"#,
        r#"{"kind":"device_refused","ts":1,"seq":0,"data":{"transport":"web","code":1008,"reason":"invalid_json","problem":"the message is not JSON (line 1, column 9)","suppressed":3}}"#,
        r#"{"kind":"device_refused","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"transport":"native","code":1008,"reason":"invalid_registry","frameType":"tool_registry_snapshot","field":"tools[1].name","problem":"`name` must match ^[A-Za-z0-9_-]{1,64}$"}}"#,
        r#"{"kind":"session_claimed","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"device":{"model":"Pixel 8"},"transport":"native"}}"#,
        r#"{"kind":"session_suspended","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"reason":"connection_lost"}}"#,
        r#"{"kind":"session_resumed","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"replacedSocket":true}}"#,
        r#"{"kind":"session_revoked","sessionId":"Zk3pQ0mX8sL1vB2n","ts":1,"seq":0,"data":{"previousState":"pending"}}"#,
        r#"{"kind":"session_expired","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{}}"#,
        r#"{"kind":"tools_changed","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"toolCount":5}}"#,
        r#"{"kind":"events_changed","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"eventCount":1}}"#,
        APP_EVENT_EXAMPLE,
        r#"{"kind":"tool_call_started","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"name":"slow_task","callId":"a","wireId":"call_k2Xh9QmT0bZr1sVw3yLpAg","caller":"mcp","deadlineMs":5000}}"#,
        r#"{"kind":"tool_call_progress","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"callId":"b","progress":0.33,"message":"step 1 of 3"}}"#,
        r#"{"kind":"tool_call_progress","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"callId":"b"}}"#,
        r#"{"kind":"tool_call_finished","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"name":"reset_counter","callId":"call_Yx1Q9m0v3w6Hk2a8Jd4cFQ","caller":"cli","durationMs":0,"outcome":"denied","deniedReason":"policy"}}"#,
        r#"{"kind":"tool_call_finished","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"name":"slow_task","callId":"b","caller":"mcp","durationMs":2003,"outcome":"cancelled","errorType":"tool_cancelled"}}"#,
        r#"{"kind":"approval_pending","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"approvalId":"apr_a","callId":"c","tool":"wipe","caller":"cli","argsSha256":"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","expiresAt":1764494223}}"#,
        r#"{"kind":"approval_settled","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"approvalId":"apr_a","callId":"c","decision":"denied","by":{"client":"appduct","pid":7},"reason":"wrong_code"}}"#,
        r#"{"kind":"policy_changed","ts":1,"seq":0,"data":{"cause":"set","target":"*/reset","decision":"deny","policy":{"default":"allow","destructive":"allow","tools":{"*/reset":"deny"}}}}"#,
        r#"{"kind":"policy_changed","ts":1,"seq":0,"data":{"cause":"reload","policy":{"default":"deny","destructive":"deny"}}}"#,
        r#"{"kind":"lease_taken","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"holder":{"client":"appduct-mcp","pid":9},"expiresAt":1764494223}}"#,
        r#"{"kind":"lease_released","sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","ts":1,"seq":0,"data":{"holder":{"pid":9},"reason":"disconnected"}}"#,
    ];
    let mut seen = Vec::new();
    for example in examples {
        let e: EventNotification = round_trip(example);
        if !seen.contains(&e.kind()) {
            seen.push(e.kind());
        }
    }
    assert_eq!(seen.as_slice(), EventKind::ALL);
}

#[test]
fn tool_call_finished_presence_rules() {
    let f = |s| {
        serde_json::to_value(ToolCallFinishedData::new("t", "c", Caller::Cli, 5, s))
            .unwrap_or_default()
    };
    let ok = f(Settlement::Ok);
    assert!(ok.get("errorType").is_none() && ok.get("deniedReason").is_none());
    let err = f(Settlement::from_error(ErrorType::ToolTimeout));
    assert_eq!(
        (err["outcome"].clone(), err["errorType"].clone()),
        (json!("error"), json!("tool_timeout"))
    );
    let cancelled = f(Settlement::from_error(ErrorType::ToolCancelled));
    assert_eq!(
        (cancelled["outcome"].clone(), cancelled["errorType"].clone()),
        (json!("cancelled"), json!("tool_cancelled"))
    );
    let denied = f(Settlement::Denied(DeniedReason::NoConsentChannel));
    assert_eq!(denied["deniedReason"], json!("no_consent_channel"));
    assert!(denied.get("errorType").is_none());
}

#[test]
fn per_call_notification_examples() {
    let started = r#"{"jsonrpc":"2.0","method":"tool_call_started","params":{"requestId":7,"callId":"mcp_Q2n7VbX0sLk4Tz9Rw1pHcA",
 "sessionId":"q3VfZ0xkR2ptTnB4","alias":"pixel-8","name":"slow_task","deadlineMs":5000,
 "ts":1764493923120}}"#;
    let progress = r#"{"jsonrpc":"2.0","method":"tool_call_progress","params":{"requestId":7,"callId":"mcp_Q2n7VbX0sLk4Tz9Rw1pHcA",
 "sessionId":"q3VfZ0xkR2ptTnB4","progress":0.66,"message":"step 2 of 3","ts":1764493924121}}"#;

    let Ok(ServerMessage::Notification(n)) = parse_server_message(compact(started).as_bytes())
    else {
        panic!("not a notification")
    };
    let Ok(ServerNotification::ToolCallStarted(s)) = ServerNotification::parse(n) else {
        panic!("not tool_call_started")
    };
    assert_eq!(s.request_id, RequestId::Number(7));
    let again = ToolCallStartedNotify::notification(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_string(&again).unwrap_or_default(),
        compact(started)
    );

    let Ok(ServerMessage::Notification(n)) = parse_server_message(compact(progress).as_bytes())
    else {
        panic!("not a notification")
    };
    let Ok(ServerNotification::ToolCallProgress(p)) = ServerNotification::parse(n) else {
        panic!("not tool_call_progress")
    };
    let again = ToolCallProgressNotify::notification(&p).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_string(&again).unwrap_or_default(),
        compact(progress)
    );
}

#[test]
fn clients_ignore_unknown_notifications_and_event_kinds() {
    let unknown = Notification::new("session_mood", Some(json!({"x": 1})));
    assert_eq!(
        ServerNotification::parse(unknown.clone()),
        Ok(ServerNotification::Unknown(unknown))
    );
    let future = Notification::new(
        "event",
        Some(json!({"kind": "web_attached", "ts": 1, "seq": 0, "data": {}})),
    );
    assert!(matches!(
        ServerNotification::parse(future),
        Ok(ServerNotification::Unknown(_))
    ));
    // A known kind with broken data is an error the client can log.
    let broken = Notification::new(
        "event",
        Some(json!({"kind": "tools_changed", "ts": 1, "seq": 0, "data": {"toolCount": "x"}})),
    );
    assert!(ServerNotification::parse(broken).is_err());
    // Unknown keys inside an event are ignored.
    let extra = Notification::new(
        "event",
        Some(
            json!({"kind": "link_expired", "sessionId": "s", "ts": 1, "seq": 0,
                    "data": {"extra": true}, "extra": 1}),
        ),
    );
    assert!(matches!(
        ServerNotification::parse(extra),
        Ok(ServerNotification::Event(_))
    ));
}

#[test]
fn spec_error_examples_round_trip() {
    let policy: ErrorObject = round_trip(
        r#"{
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
}"#,
    );
    assert_eq!(policy.error_type(), ErrorType::PolicyDenied);
    assert_eq!(policy.error_type().exit_code(), 77);

    // §C10.2: the cancelled call's response, built the way the daemon would.
    let built = Response::error(
        Some(RequestId::Number(2)),
        ErrorObject::application(
            ErrorType::ToolCancelled,
            "Tool \"slow_task\" was cancelled.",
        )
        .with_call_id("b"),
    );
    assert_eq!(
        serde_json::to_string(&built).unwrap_or_default(),
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"Tool \"slow_task\" was cancelled.","data":{"type":"tool_cancelled","callId":"b"}}}"#
    );
}

// ------------------------------------------------------------------------------------------
// Framing and classification (§C2–§C3.1), through the framer as the daemon reads them
// ------------------------------------------------------------------------------------------

/// Feeds `input` through a framer with `cap` and classifies every line, as a daemon would.
fn daemon_reads(input: &[u8], cap: usize) -> Vec<Result<Incoming, Overflow>> {
    let mut buf = LineBuffer::new(cap);
    buf.push(input);
    let mut out = Vec::new();
    while let Some(line) = buf.next_line() {
        match line {
            Ok(l) => out.push(Ok(parse_incoming(&l))),
            Err(o) => {
                out.push(Err(o));
                break;
            }
        }
    }
    out
}

fn reply_line(incoming: &Incoming) -> String {
    match incoming {
        Incoming::Invalid(r) => {
            String::from_utf8(to_line(r).unwrap_or_default()).unwrap_or_default()
        }
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn a_bad_line_gets_an_error_and_later_lines_still_run() {
    let input = b"{oops\r\n\n[1,2]\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"}\r\n\xff\n{\"jsonrpc\":\"2.0\",\"method\":\"daemon.shutdown\"}\n";
    let got = daemon_reads(input, 1024);
    assert_eq!(got.len(), 5);
    let parse_err = |i: usize| match &got[i] {
        Ok(inc) => reply_line(inc),
        Err(o) => panic!("overflow {o:?}"),
    };
    assert!(parse_err(0).starts_with(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"#));
    assert!(parse_err(0).contains(r#""data":{"type":"invalid_request"}"#));
    assert!(parse_err(1).starts_with(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"#));
    assert_eq!(
        got[2],
        Ok(Incoming::Request(appduct_protocol::jsonrpc::Request::new(
            1,
            "daemon.status",
            None
        )))
    );
    assert!(parse_err(3).contains(r#""code":-32700"#));
    // The notification is neither executed nor answered.
    assert!(matches!(got[4], Ok(Incoming::Notification(_))));
}

#[test]
fn an_overlong_line_fails_before_its_newline() {
    let cap = 64;
    let mut input = br#"{"jsonrpc":"2.0","id":1,"method":"sessions.list"}"#.to_vec();
    input.push(b'\n');
    input.extend(std::iter::repeat_n(b'x', cap + 1)); // no newline yet
    let got = daemon_reads(&input, cap);
    assert!(matches!(got[0], Ok(Incoming::Request(_))));
    assert_eq!(got[1], Err(Overflow { cap }));
    let reply = Response::error(None, ErrorObject::line_too_long(cap));
    let v = serde_json::to_value(&reply).unwrap_or_default();
    assert_eq!(v["error"]["code"], json!(-32600));
    assert_eq!(v["error"]["data"]["details"], json!({"maxLineBytes": 64}));
    assert_eq!(v["id"], Value::Null);
}

#[test]
fn params_shapes_through_dispatch() {
    let dispatch = |line: &str| match parse_incoming(line.as_bytes()) {
        Incoming::Request(r) => ControlRequest::parse(&r.method, r.params.as_ref()),
        other => panic!("not a request: {other:?}"),
    };
    // Absent and null params equal {}.
    assert!(dispatch(r#"{"jsonrpc":"2.0","id":1,"method":"sessions.list"}"#).is_ok());
    assert!(dispatch(r#"{"jsonrpc":"2.0","id":1,"method":"sessions.list","params":null}"#).is_ok());
    // Non-object params: -32602 naming "params".
    let e = dispatch(r#"{"jsonrpc":"2.0","id":1,"method":"sessions.list","params":[]}"#).err();
    assert_eq!(e.as_ref().map(|e| e.code), Some(-32602));
    assert_eq!(
        e.and_then(|e| e.details().map(|d| d["param"].clone())),
        Some(json!("params"))
    );
    // Unknown method: -32601 with details.method, whatever the params.
    let e = dispatch(r#"{"jsonrpc":"2.0","id":1,"method":"web.attach","params":[]}"#).err();
    assert_eq!(e.as_ref().map(|e| e.code), Some(-32601));
    assert_eq!(
        e.and_then(|e| e.details().cloned()),
        Some(json!({"method": "web.attach"}))
    );
}

#[test]
fn approvals_params() {
    let p = valid::<ApprovalsDecide>(json!({"approvalId": "apr_x", "decision": "approve",
        "code": "123-456", "grant": {"scope": "tool", "minutes": 30}}));
    assert_eq!(p.decision, ApprovalDecision::Approve);
    assert_eq!(p.grant.map(|g| g.minutes()), Some(30));
    // The code never shows in Debug output.
    assert!(!format!("{p:?}").contains("123-456"));
    let p = valid::<ApprovalsDecide>(json!({"approvalId": "apr_x", "decision": "approve",
        "grant": {"scope": "tool"}}));
    assert_eq!(p.grant.map(|g| g.minutes()), Some(DEFAULT_GRANT_MINUTES));
    valid::<ApprovalsDecide>(json!({"approvalId": "apr_x", "decision": "deny"}));
    invalid::<ApprovalsDecide>(json!({"decision": "deny"}), "approvalId");
    invalid::<ApprovalsDecide>(json!({"approvalId": "apr_x"}), "decision");
    invalid::<ApprovalsDecide>(
        json!({"approvalId": "apr x", "decision": "deny"}),
        "approvalId",
    );
    invalid::<ApprovalsDecide>(json!({"approvalId": "a", "decision": "allow"}), "decision");
    invalid::<ApprovalsDecide>(
        json!({"approvalId": "a", "decision": "deny", "grant": {"scope": "call"}}),
        "grant",
    );
    invalid::<ApprovalsDecide>(
        json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "tool", "minutes": 1441}}),
        "grant.minutes",
    );
    invalid::<ApprovalsDecide>(
        json!({"approvalId": "a", "decision": "approve", "grant": {"scope": "call", "minutes": 5}}),
        "grant.minutes",
    );
    invalid::<ApprovalsDecide>(
        json!({"approvalId": "a", "decision": "approve", "code": ""}),
        "code",
    );
    valid::<ApprovalsChallenge>(json!({"approvalId": "apr_x"}));
    invalid::<ApprovalsChallenge>(json!({}), "approvalId");
    valid::<GrantsRevoke>(json!({"grantId": "grt_x"}));
    invalid::<GrantsRevoke>(json!({"grantId": 5}), "grantId");
    valid::<ApprovalsList>(json!({}));
    valid::<GrantsList>(json!({}));
    valid::<CallsList>(json!({}));
}
