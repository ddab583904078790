//! The errors the calls module builds itself, with the exact messages and `details` of
//! §C10.1, §C10.3, §C10.6 and §C10.7. App errors pass through verbatim and are not built here.

use appduct_protocol::control::SuspendReason;
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use appduct_protocol::limits;
use serde_json::{Value, json};

use crate::sessions::CallsEnded;

/// A tool name as the messages quote it: a JSON string.
fn quoted(name: &str) -> String {
    Value::String(name.to_owned()).to_string()
}

/// The session-suspended message of §C10.1 step 4 (also used for §D12.4 suspensions).
fn suspended_message(alias: &str, reason: SuspendReason) -> String {
    match reason {
        SuspendReason::AppBackgrounded => format!(
            "The app on {alias} is in the background; bring it to the foreground and retry."
        ),
        SuspendReason::ConnectionLost => format!(
            "{alias} lost its connection; the session is suspended until the app reconnects."
        ),
    }
}

/// Step 4: the session is suspended (`details: {sessionId, alias, suspendReason}`).
pub fn session_suspended(session_id: &str, alias: &str, reason: SuspendReason) -> ErrorObject {
    ErrorObject::application(
        ErrorType::SessionSuspended,
        suspended_message(alias, reason),
    )
    .with_details(json!({"sessionId": session_id, "alias": alias, "suspendReason": reason}))
}

/// Step 5: the tool is not in the session's registry (`details: {name, sessionId, alias}`).
pub fn tool_not_found(name: &str, session_id: &str, alias: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::ToolNotFound,
        format!(
            "Tool {} is not registered on {alias}; tools.list shows the tools it has",
            quoted(name)
        ),
    )
    .with_details(json!({"name": name, "sessionId": session_id, "alias": alias}))
}

/// `tools.result` (§C8.43): no call with this callId is in flight or kept.
pub fn call_not_retained(call_id: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "No call {} is in flight or kept; settled outcomes are kept for a bounded window (§C10.10)",
            quoted(call_id)
        ),
    )
    .with_details(json!({"reason": "call_not_retained", "callId": call_id}))
}

/// `tools.result` with `waitMs` past [`limits::MAX_RESULT_WAITS`] waiting on one connection.
pub fn too_many_result_waits(limit: usize) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "Too many tools.result requests are waiting on this connection ({limit}); wait for one to answer, or ask without waitMs"
        ),
    )
    .with_details(json!({"reason": "too_many_result_waits", "limit": limit}))
}

/// `tools.result` with `waitMs` past [`limits::MAX_RESULT_WAITS_TOTAL`] waiting in the daemon.
pub fn too_many_result_waits_daemon_wide(limit: usize) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "Too many tools.result requests are waiting in the daemon ({limit}, all connections together); wait for one to answer, or ask without waitMs"
        ),
    )
    .with_details(json!({"reason": "too_many_result_waits", "limit": limit, "scope": "daemon"}))
}

/// Step 2: the caller's callId belongs to an unsettled call.
pub fn call_id_in_use(call_id: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "callId {} is already used by a call that has not settled",
            quoted(call_id)
        ),
    )
    .with_details(json!({"reason": "call_id_in_use", "callId": call_id}))
}

/// Step 8: no socket, or the write failed.
pub fn session_not_active(session_id: &str, alias: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::SessionNotActive,
        format!("{alias} has no usable connection; the call could not be sent"),
    )
    .with_details(json!({"sessionId": session_id, "alias": alias}))
}

/// Step 8: a `tool_call` frame over 262144 bytes is never written (§D7.5).
pub fn frame_too_large(bytes: usize) -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        format!(
            "The tool_call frame would be {bytes} bytes; frames are at most {} bytes",
            limits::MAX_MESSAGE_BYTES
        ),
    )
    .with_details(json!({"maxMessageBytes": limits::MAX_MESSAGE_BYTES}))
}

/// §C10.3: the daemon's deadline passed with no cancel requested.
pub fn tool_timeout(name: &str, alias: &str, deadline_ms: u64) -> ErrorObject {
    ErrorObject::application(
        ErrorType::ToolTimeout,
        format!(
            "{} on {alias} did not finish within {deadline_ms} ms",
            quoted(name)
        ),
    )
    .with_details(json!({ "deadlineMs": deadline_ms }))
}

/// §C10.6: the cancel grace or the deadline ended a cancelled call, or a cancel stopped the call
/// before its frame was sent.
pub fn cancelled_by_daemon(name: &str, alias: &str, reason: &str) -> ErrorObject {
    ErrorObject::application(
        ErrorType::ToolCancelled,
        format!(
            "Call to {} on {alias} was cancelled ({reason})",
            quoted(name)
        ),
    )
    .with_details(json!({"reason": reason, "settledBy": "daemon"}))
}

/// §C8.3: shutdown step 2 (and any straggler the engine reports at T18).
pub fn daemon_shutdown() -> ErrorObject {
    ErrorObject::application(ErrorType::SessionNotActive, "The daemon is shutting down")
        .with_details(json!({"reason": "daemon_shutdown"}))
}

/// §D12.4: what a transition of the call's session makes of it.
pub fn session_ended(why: CallsEnded, session_id: &str, alias: &str) -> ErrorObject {
    match why {
        CallsEnded::Suspended(reason) => session_suspended(session_id, alias, reason),
        CallsEnded::Replaced => ErrorObject::application(
            ErrorType::SessionSuspended,
            format!(
                "The app on {alias} reconnected on a new connection; calls in flight on the old one were dropped."
            ),
        )
        .with_details(json!({"sessionId": session_id, "alias": alias, "reason": "session_replaced"})),
        CallsEnded::Revoked => ErrorObject::application(
            ErrorType::UnknownSession,
            format!("Session {session_id} ({alias}) was revoked while the call was in flight"),
        )
        .with_details(json!({"sessionId": session_id, "reason": "revoked"})),
        CallsEnded::Expired => ErrorObject::application(
            ErrorType::UnknownSession,
            format!("Session {session_id} ({alias}) expired while the call was in flight"),
        )
        .with_details(json!({"sessionId": session_id, "reason": "expired"})),
        CallsEnded::Shutdown => daemon_shutdown(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(e: &ErrorObject) -> Value {
        e.details().cloned().unwrap_or(Value::Null)
    }

    #[test]
    fn suspension_messages_follow_the_reason() {
        let e = session_suspended("S", "pixel-8", SuspendReason::AppBackgrounded);
        assert_eq!(e.code, -32000);
        assert_eq!(e.error_type(), ErrorType::SessionSuspended);
        assert_eq!(
            e.message,
            "The app on pixel-8 is in the background; bring it to the foreground and retry."
        );
        assert_eq!(
            details(&e),
            json!({"sessionId": "S", "alias": "pixel-8", "suspendReason": "app_backgrounded"})
        );
        let e = session_suspended("S", "pixel-8", SuspendReason::ConnectionLost);
        assert_eq!(
            e.message,
            "pixel-8 lost its connection; the session is suspended until the app reconnects."
        );
    }

    #[test]
    fn timeout_and_daemon_cancel_use_the_spec_sentences() {
        let e = tool_timeout("slow_task", "pixel-8", 5000);
        assert_eq!(
            e.message,
            "\"slow_task\" on pixel-8 did not finish within 5000 ms"
        );
        assert_eq!(details(&e), json!({"deadlineMs": 5000}));
        let e = cancelled_by_daemon("slow_task", "pixel-8", "client_cancelled");
        assert_eq!(
            e.message,
            "Call to \"slow_task\" on pixel-8 was cancelled (client_cancelled)"
        );
        assert_eq!(
            details(&e),
            json!({"reason": "client_cancelled", "settledBy": "daemon"})
        );
    }

    #[test]
    fn transitions_map_to_the_details_of_8_1() {
        let cases = [
            (
                CallsEnded::Suspended(SuspendReason::ConnectionLost),
                ErrorType::SessionSuspended,
                json!({"sessionId": "S", "alias": "a", "suspendReason": "connection_lost"}),
            ),
            (
                CallsEnded::Replaced,
                ErrorType::SessionSuspended,
                json!({"sessionId": "S", "alias": "a", "reason": "session_replaced"}),
            ),
            (
                CallsEnded::Revoked,
                ErrorType::UnknownSession,
                json!({"sessionId": "S", "reason": "revoked"}),
            ),
            (
                CallsEnded::Expired,
                ErrorType::UnknownSession,
                json!({"sessionId": "S", "reason": "expired"}),
            ),
            (
                CallsEnded::Shutdown,
                ErrorType::SessionNotActive,
                json!({"reason": "daemon_shutdown"}),
            ),
        ];
        for (why, ty, want) in cases {
            let e = session_ended(why, "S", "a");
            assert_eq!(e.error_type(), ty, "{why:?}");
            assert_eq!(details(&e), want, "{why:?}");
        }
        assert_eq!(
            session_ended(CallsEnded::Shutdown, "S", "a").message,
            "The daemon is shutting down"
        );
    }

    #[test]
    fn lookup_errors_name_what_they_are_about() {
        let e = tool_not_found("nope", "S", "pixel-8");
        assert!(e.message.contains("\"nope\"") && e.message.contains("pixel-8"));
        assert!(e.message.contains("tools.list"));
        assert_eq!(
            details(&e),
            json!({"name": "nope", "sessionId": "S", "alias": "pixel-8"})
        );
        let e = call_id_in_use("a");
        assert_eq!(
            (e.code, e.error_type()),
            (-32000, ErrorType::InvalidRequest)
        );
        assert_eq!(
            details(&e),
            json!({"reason": "call_id_in_use", "callId": "a"})
        );
        assert_eq!(
            details(&frame_too_large(300_000)),
            json!({"maxMessageBytes": 262_144})
        );
    }
}
