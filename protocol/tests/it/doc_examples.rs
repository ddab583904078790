//! Every ```json example of `docs/protocol/*.md` checked against this crate (issue #25), so an
//! example that drifts from the code fails.
//!
//! Each fence must follow a marker line `<!-- example: <kind> <args…> -->` naming what it shows:
//!
//! | Marker | Check |
//! | --- | --- |
//! | `bootstrap` | `{base64url, decoded}`: `bootstrap::decode` gives `decoded`, and re-encodes to `base64url` |
//! | `app-frame <type>` | the daemon's guard (`frames::decode_app_message`, before the ack for claims and resumes, after it otherwise) accepts it as `<type>`, and its re-encoding equals the example (no unknown or misspelt field) |
//! | `app-frame-refused <reason>` | the daemon's guard refuses it with the close reason `<reason>` |
//! | `daemon-frame <type>` | the app-side decoder reads it as `<type>`, and its re-encoding equals the example |
//! | `control-request <method>` | a request line for `<method>` that `jsonrpc::parse_incoming` and the method's params validator accept |
//! | `control-result <method>` | a response line whose `result` decodes as the method's result type and re-encodes unchanged |
//! | `control-error <type>` | an error response of `data.type` `<type>`, re-encoding unchanged |
//! | `notification <method>` | a notification line the client decodes as a known notification, re-encoding unchanged |
//!
//! Each example (but `bootstrap`, which is no JSON message, and `app-frame-refused`, since some
//! refusals are semantic) must also validate against its JSON Schema in `docs/schemas/`
//! (`appduct_protocol::schema`): its frame, its `params`, its `result` or its `error`; an
//! `event` notification against the schema of its kind as well.
//!
//! A second test checks that the examples cover every frame type, every method (request and
//! result), every notification and every event kind.

use std::collections::BTreeSet;
use std::path::PathBuf;

use appduct_protocol::bootstrap;
use appduct_protocol::control::{self, EventKind, Method, ServerNotification};
use appduct_protocol::frames::{self, Phase};
use appduct_protocol::jsonrpc::{self, Incoming, ServerMessage};
use appduct_protocol::schema;
use serde_json::Value;

struct Example {
    /// `device.md:123`, for failure messages.
    at: String,
    kind: String,
    args: Vec<String>,
    text: String,
}

fn docs_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol"))
}

/// Every ```json fence of the docs, with its marker; unmarked fences are errors.
fn examples() -> (Vec<Example>, Vec<String>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(docs_dir())
        .unwrap_or_else(|e| panic!("docs/protocol must exist: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no documents in docs/protocol");
    let (mut out, mut errors) = (Vec::new(), Vec::new());
    for path in files {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim_end() != "```json" {
                i += 1;
                continue;
            }
            let at = format!("{name}:{}", i + 1);
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| {
                    l.trim()
                        .strip_prefix("<!-- example:")
                        .and_then(|m| m.strip_suffix("-->"))
                });
            let end = lines[i + 1..]
                .iter()
                .position(|l| l.trim_end() == "```")
                .map(|n| i + 1 + n)
                .unwrap_or_else(|| panic!("{at}: unterminated fence"));
            let body = lines[i + 1..end].join("\n");
            match marker {
                None => errors.push(format!(
                    "{at}: a json example without an `<!-- example: … -->` marker"
                )),
                Some(m) => {
                    let mut words = m.split_whitespace().map(str::to_owned);
                    let kind = words.next().unwrap_or_default();
                    out.push(Example {
                        at,
                        kind,
                        args: words.collect(),
                        text: body,
                    });
                }
            }
            i = end + 1;
        }
    }
    (out, errors)
}

fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

fn arg(ex: &Example, n: usize) -> Result<&str, String> {
    ex.args
        .get(n)
        .map(String::as_str)
        .ok_or_else(|| format!("marker `{}` needs {} argument(s)", ex.kind, n + 1))
}

fn same(what: &str, got: &Value, want: &Value) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{what} re-encodes as\n  {got}\nnot as the example\n  {want}"
        ))
    }
}

fn check_bootstrap(ex: &Example) -> Result<(), String> {
    let v = parse(&ex.text)?;
    let text = v["base64url"]
        .as_str()
        .ok_or("`base64url` must be a string")?;
    let payload = bootstrap::decode(text).map_err(|e| format!("does not decode: {e}"))?;
    let decoded = serde_json::to_value(payload.decoded()).map_err(|e| e.to_string())?;
    same("the decoded payload", &decoded, &v["decoded"])?;
    let encoded = payload.encode().map_err(|e| e.to_string())?;
    if encoded != text {
        return Err(format!("re-encodes as {encoded}"));
    }
    Ok(())
}

/// The phase a frame of this type is sent in.
fn phase_for<'a>(ty: &str, v: &'a Value) -> Phase<'a> {
    match ty {
        "session_claim" | "session_resume" => Phase::PreAck,
        _ => Phase::Acked {
            session_id: v["session_id"].as_str().unwrap_or("Yk3wL0pQz7sX2nVa"),
        },
    }
}

fn check_app_frame(ex: &Example) -> Result<(), String> {
    let ty = arg(ex, 0)?;
    let v = parse(&ex.text)?;
    let frame = frames::decode_app_message(&ex.text, phase_for(ty, &v))
        .map_err(|r| format!("refused: {r}"))?;
    if frame.type_name() != ty {
        return Err(format!("decodes as {}, not {ty}", frame.type_name()));
    }
    same("the frame", &frame.to_value(), &v)
}

fn check_app_frame_refused(ex: &Example) -> Result<(), String> {
    let reason = arg(ex, 0)?;
    let v = parse(&ex.text)?;
    let ty = v["type"].as_str().unwrap_or_default();
    match frames::decode_app_message(&ex.text, phase_for(ty, &v)) {
        Ok(f) => Err(format!("accepted as {}", f.type_name())),
        Err(r) if r.reason.reason() == reason => Ok(()),
        Err(r) => Err(format!(
            "refused as {}, not {reason} ({r})",
            r.reason.reason()
        )),
    }
}

fn check_daemon_frame(ex: &Example) -> Result<(), String> {
    let ty = arg(ex, 0)?;
    let v = parse(&ex.text)?;
    let frame = frames::decode_daemon_message(&ex.text)
        .map_err(|e| format!("refused: {e}"))?
        .ok_or("not a known daemon frame")?;
    if frame.type_name() != ty {
        return Err(format!("decodes as {}, not {ty}", frame.type_name()));
    }
    same("the frame", &frame.to_value(), &v)
}

fn check_request(ex: &Example) -> Result<(), String> {
    let method = arg(ex, 0)?;
    let request = match jsonrpc::parse_incoming(ex.text.as_bytes()) {
        Incoming::Request(r) => r,
        other => return Err(format!("not a request: {other:?}")),
    };
    if request.method != method {
        return Err(format!("calls {}, not {method}", request.method));
    }
    control::ControlRequest::parse(&request.method, request.params.as_ref())
        .map(|_| ())
        .map_err(|e| format!("params refused: {e}"))
}

fn response(ex: &Example) -> Result<(Value, jsonrpc::Response), String> {
    let v = parse(&ex.text)?;
    match jsonrpc::parse_server_message(ex.text.as_bytes()) {
        Ok(ServerMessage::Response(r)) => Ok((v, r)),
        Ok(ServerMessage::Notification(_)) => Err("a notification, not a response".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn round_trip<M: Method>(result: &Value) -> Result<(), String> {
    let typed: M::Result = serde_json::from_value(result.clone())
        .map_err(|e| format!("not a {} result: {e}", M::NAME))?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    same("the result", &back, result)
}

fn check_result(ex: &Example) -> Result<(), String> {
    let method = arg(ex, 0)?;
    let (_, r) = response(ex)?;
    let result = r.outcome.map_err(|e| format!("an error response: {e}"))?;
    use control::*;
    match method {
        DaemonHello::NAME => round_trip::<DaemonHello>(&result),
        DaemonStatus::NAME => round_trip::<DaemonStatus>(&result),
        DaemonShutdown::NAME => round_trip::<DaemonShutdown>(&result),
        LinkCreate::NAME => round_trip::<LinkCreate>(&result),
        ConsentCreate::NAME => round_trip::<ConsentCreate>(&result),
        ConsentTake::NAME => round_trip::<ConsentTake>(&result),
        SessionsList::NAME => round_trip::<SessionsList>(&result),
        SessionsDescribe::NAME => round_trip::<SessionsDescribe>(&result),
        SessionsRevoke::NAME => round_trip::<SessionsRevoke>(&result),
        ToolsList::NAME => round_trip::<ToolsList>(&result),
        ToolsCall::NAME => round_trip::<ToolsCall>(&result),
        ToolsCancel::NAME => round_trip::<ToolsCancel>(&result),
        EventsList::NAME => round_trip::<EventsList>(&result),
        EventsSubscribe::NAME => round_trip::<EventsSubscribe>(&result),
        EventsSince::NAME => round_trip::<EventsSince>(&result),
        ApprovalsList::NAME => round_trip::<ApprovalsList>(&result),
        ApprovalsChallenge::NAME => round_trip::<ApprovalsChallenge>(&result),
        ApprovalsDecide::NAME => round_trip::<ApprovalsDecide>(&result),
        GrantsList::NAME => round_trip::<GrantsList>(&result),
        GrantsRevoke::NAME => round_trip::<GrantsRevoke>(&result),
        PolicyList::NAME => round_trip::<PolicyList>(&result),
        PolicySet::NAME => round_trip::<PolicySet>(&result),
        PolicyReset::NAME => round_trip::<PolicyReset>(&result),
        DaemonReload::NAME => round_trip::<DaemonReload>(&result),
        CallsList::NAME => round_trip::<CallsList>(&result),
        SessionsLease::NAME => round_trip::<SessionsLease>(&result),
        SessionsRelease::NAME => round_trip::<SessionsRelease>(&result),
        ToolsResult::NAME => round_trip::<ToolsResult>(&result),
        other => Err(format!("unknown method {other}")),
    }
}

fn check_error(ex: &Example) -> Result<(), String> {
    let ty = arg(ex, 0)?;
    let (v, r) = response(ex)?;
    let e = match r.outcome {
        Ok(_) => return Err("a success response".into()),
        Err(e) => e,
    };
    if e.error_type().as_str() != ty {
        return Err(format!("data.type is {}, not {ty}", e.error_type()));
    }
    let back = serde_json::to_value(&e).map_err(|e| e.to_string())?;
    same("the error", &back, &v["error"])
}

fn check_notification(ex: &Example) -> Result<(), String> {
    let method = arg(ex, 0)?;
    let v = parse(&ex.text)?;
    let n = match jsonrpc::parse_server_message(ex.text.as_bytes()) {
        Ok(ServerMessage::Notification(n)) => n,
        Ok(ServerMessage::Response(_)) => return Err("a response, not a notification".into()),
        Err(e) => return Err(e.to_string()),
    };
    if n.method != method {
        return Err(format!("method {}, not {method}", n.method));
    }
    let params = match ServerNotification::parse(n).map_err(|e| e.to_string())? {
        ServerNotification::Event(e) => serde_json::to_value(&e),
        ServerNotification::ToolCallStarted(p) => serde_json::to_value(&p),
        ServerNotification::ToolCallProgress(p) => serde_json::to_value(&p),
        ServerNotification::Unknown(_) => return Err("not a known notification".into()),
    }
    .map_err(|e| e.to_string())?;
    same("the params", &params, &v["params"])
}

/// The example (or its member) against its schema.
fn check_schema(ex: &Example) -> Result<(), String> {
    let validate = crate::schemas::validate;
    let missing = || format!("no schema for `{} {}`", ex.kind, ex.args.join(" "));
    let v = parse(&ex.text)?;
    let member = |key: &str| v.get(key).cloned().unwrap_or(Value::Null);
    match ex.kind.as_str() {
        "bootstrap" | "app-frame-refused" => Ok(()),
        "app-frame" => validate(&schema::app_frame(arg(ex, 0)?).ok_or_else(missing)?, &v),
        "daemon-frame" => validate(&schema::daemon_frame(arg(ex, 0)?).ok_or_else(missing)?, &v),
        "control-request" => validate(
            &schema::method_params(arg(ex, 0)?).ok_or_else(missing)?,
            &member("params"),
        ),
        "control-result" => validate(
            &schema::method_result(arg(ex, 0)?).ok_or_else(missing)?,
            &member("result"),
        ),
        "control-error" => validate(&schema::control_error(), &member("error")),
        "notification" => {
            let params = member("params");
            validate(
                &schema::notification(arg(ex, 0)?).ok_or_else(missing)?,
                &params,
            )?;
            match params["kind"].as_str().map(str::parse::<EventKind>) {
                Some(Ok(kind)) if arg(ex, 0)? == "event" => validate(&schema::event(kind), &params),
                _ => Ok(()),
            }
        }
        other => Err(format!("unknown example kind `{other}`")),
    }
}

fn check(ex: &Example) -> Result<(), String> {
    check_code(ex)?;
    check_schema(ex)
}

fn check_code(ex: &Example) -> Result<(), String> {
    match ex.kind.as_str() {
        "bootstrap" => check_bootstrap(ex),
        "app-frame" => check_app_frame(ex),
        "app-frame-refused" => check_app_frame_refused(ex),
        "daemon-frame" => check_daemon_frame(ex),
        "control-request" => check_request(ex),
        "control-result" => check_result(ex),
        "control-error" => check_error(ex),
        "notification" => check_notification(ex),
        other => Err(format!("unknown example kind `{other}`")),
    }
}

#[test]
fn every_json_example_in_the_protocol_docs_matches_the_code() {
    let (examples, mut failures) = examples();
    for ex in &examples {
        if let Err(e) = check(ex) {
            failures.push(format!(
                "{} ({} {}): {e}",
                ex.at,
                ex.kind,
                ex.args.join(" ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples fail:\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n")
    );
    assert!(
        examples.len() > 40,
        "only {} examples found",
        examples.len()
    );
}

#[test]
fn the_examples_cover_every_frame_method_notification_and_event_kind() {
    let (examples, _) = examples();
    let shown: BTreeSet<String> = examples
        .iter()
        .map(|ex| format!("{} {}", ex.kind, ex.args.join(" ")))
        .collect();
    let mut wanted: Vec<String> = Vec::new();
    for ty in [
        "session_claim",
        "session_resume",
        "tool_registry_snapshot",
        "tool_registry_delta",
        "event_registry_snapshot",
        "event_registry_delta",
        "tool_result",
        "tool_error",
        "tool_call_progress",
        "event",
    ] {
        wanted.push(format!("app-frame {ty}"));
    }
    for ty in ["session_ack", "tool_call", "tool_cancel"] {
        wanted.push(format!("daemon-frame {ty}"));
    }
    for method in control::METHODS {
        wanted.push(format!("control-request {method}"));
        wanted.push(format!("control-result {method}"));
    }
    for method in ["event", "tool_call_started", "tool_call_progress"] {
        wanted.push(format!("notification {method}"));
    }
    let missing: Vec<&String> = wanted.iter().filter(|w| !shown.contains(*w)).collect();
    assert!(missing.is_empty(), "no example for: {missing:?}");

    // Every event kind appears in at least one `event` notification example.
    let kinds: BTreeSet<String> = examples
        .iter()
        .filter(|ex| ex.kind == "notification" && ex.args.first().is_some_and(|m| m == "event"))
        .filter_map(|ex| parse(&ex.text).ok())
        .filter_map(|v| v["params"]["kind"].as_str().map(str::to_owned))
        .collect();
    let missing: Vec<&str> = EventKind::ALL
        .iter()
        .map(|k| k.as_str())
        .filter(|k| !kinds.contains(*k))
        .collect();
    assert!(missing.is_empty(), "no event example of kind: {missing:?}");
}

/// The schema leg of the check refuses what its schema refuses (so a passing run means the
/// examples fit, not that nothing was checked).
#[test]
fn the_schema_check_refuses_examples_that_do_not_fit() {
    let ex = |kind: &str, arg: &str, text: &str| Example {
        at: "test".into(),
        kind: kind.into(),
        args: vec![arg.into()],
        text: text.into(),
    };
    let claim = |extra: &str| {
        format!(
            r#"{{"type":"session_claim","protocol_version":2,"session_id":"Yk3wL0pQz7sX2nVa","token":"ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8"{extra}}}"#
        )
    };
    let cases = [
        (ex("app-frame", "session_claim", &claim("")), true),
        (
            ex("app-frame", "session_claim", &claim(r#","device_model":5"#)),
            false,
        ),
        (
            ex(
                "daemon-frame",
                "tool_cancel",
                r#"{"type":"tool_cancel","session_id":"s","id":"c","reason":"deadline"}"#,
            ),
            true,
        ),
        (
            ex(
                "daemon-frame",
                "tool_cancel",
                r#"{"type":"tool_cancel","session_id":"s","id":"c"}"#,
            ),
            false,
        ),
        (
            ex(
                "control-request",
                "tools.call",
                r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"x"}}"#,
            ),
            true,
        ),
        (
            ex(
                "control-request",
                "tools.call",
                r#"{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"x","selectr":"a"}}"#,
            ),
            false,
        ),
        (
            ex(
                "control-result",
                "tools.cancel",
                r#"{"jsonrpc":"2.0","id":1,"result":{"cancelled":true}}"#,
            ),
            true,
        ),
        (
            ex(
                "control-result",
                "tools.cancel",
                r#"{"jsonrpc":"2.0","id":1,"result":{"cancelled":"yes"}}"#,
            ),
            false,
        ),
        (
            ex(
                "control-error",
                "x",
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"m","data":{"type":"invalid_request"}}}"#,
            ),
            true,
        ),
        (
            ex(
                "control-error",
                "x",
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"m","data":{"type":"nope"}}}"#,
            ),
            false,
        ),
        (
            ex(
                "notification",
                "event",
                r#"{"jsonrpc":"2.0","method":"event","params":{"kind":"tools_changed","sessionId":"s","ts":1,"seq":0,"data":{"toolCount":2}}}"#,
            ),
            true,
        ),
        (
            ex(
                "notification",
                "event",
                r#"{"jsonrpc":"2.0","method":"event","params":{"kind":"tools_changed","sessionId":"s","ts":1,"seq":0,"data":{"toolCount":"2"}}}"#,
            ),
            false,
        ),
    ];
    for (example, fits) in &cases {
        assert_eq!(
            check_schema(example).is_ok(),
            *fits,
            "{} {}: {}",
            example.kind,
            example.text,
            check_schema(example).err().unwrap_or_default()
        );
    }
}
