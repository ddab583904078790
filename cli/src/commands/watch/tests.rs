//! The live view's model and frames (§L23): state updates from control replies and events,
//! and `WatchState`s rendered into a ratatui `TestBackend` (issue #16 "Done when").

use appduct_protocol::control::{
    ApprovalSummary, CallState, CallSummary, EventNotification, SessionSummary,
};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::{Value, json};

use super::state::{MAX_EVENT_LINES, RATE_WINDOW_S, WatchState, elapsed_ms, progress_ratio};
use super::view;

const T0: u64 = 1_796_083_200_000;
const SID: &str = "Yk3wL0pQz7sX2nVa";

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("test value: {e}"))
}

fn session(alias: &str, state: &str, tools: u64) -> SessionSummary {
    from(json!({
        "sessionId": SID, "alias": alias, "state": state, "transport": "native",
        "device": {"manufacturer": "Google", "model": "Pixel 8", "os": "Android 15"},
        "createdAt": "2026-12-01T09:00:00.000Z", "claimedAt": "2026-12-01T09:00:01.000Z",
        "toolCount": tools, "eventCount": 0
    }))
}

fn call(progress: Option<Value>) -> CallSummary {
    let mut v = json!({
        "callId": "cart-1", "wireId": "call_EJ1aEJ98TORzmO6siiaRtg", "sessionId": SID,
        "alias": "pixel-8", "tool": "add_item", "caller": "client", "state": "running",
        "startedAt": "2026-12-01T00:00:00.000Z", "elapsedMs": 1250, "deadlineMs": 5000,
        "expiresAt": 1_796_083_205u64
    });
    if let Some(p) = progress {
        v["progress"] = p;
    }
    from(v)
}

fn approval(id: &str, tool: &str) -> ApprovalSummary {
    from(json!({
        "approvalId": id, "callId": "call_Qm8v0Zp3RkY1xWn5TdLs2A", "sessionId": SID,
        "alias": "pixel-8", "tool": tool, "caller": "cli", "argsSha256": "44".repeat(32),
        "createdAt": "2026-12-01T00:00:00.000Z", "expiresAt": T0 / 1000 + 90, "attemptsLeft": 3
    }))
}

fn event(kind: &str, ts: u64, data: Value) -> EventNotification {
    from(
        json!({"kind": kind, "sessionId": SID, "alias": "pixel-8", "ts": ts, "seq": 0, "data": data}),
    )
}

/// The frame as text, one line per row.
fn frame(state: &WatchState, width: u16, height: u16) -> Vec<String> {
    let mut terminal = match Terminal::new(TestBackend::new(width, height)) {
        Ok(t) => t,
        Err(e) => panic!("test backend: {e}"),
    };
    if let Err(e) = terminal.draw(|f| view::draw(f, state, true)) {
        panic!("draw: {e}");
    }
    let buffer = terminal.backend().buffer();
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol().to_owned())
                .collect::<String>()
        })
        .collect()
}

fn row_with<'a>(rows: &'a [String], needle: &str) -> &'a str {
    match rows.iter().find(|r| r.contains(needle)) {
        Some(r) => r,
        None => panic!("no row with {needle:?} in\n{}", rows.join("\n")),
    }
}

#[test]
fn frame_shows_sessions_with_state_alias_device_and_tool_count() {
    let mut state = WatchState::new(T0);
    state.set_sessions(vec![
        session("pixel-8", "active", 3),
        session("web-1", "suspended", 12),
    ]);
    let rows = frame(&state, 140, 30);
    let first = row_with(&rows, "pixel-8");
    for cell in ["active", "Google Pixel 8 Android 15", " 3"] {
        assert!(first.contains(cell), "{cell:?} missing in {first:?}");
    }
    let second = row_with(&rows, "web-1");
    assert!(
        second.contains("suspended") && second.contains("12"),
        "{second:?}"
    );
    assert!(
        row_with(&rows, "Sessions").contains("ALIAS") || rows.iter().any(|r| r.contains("ALIAS"))
    );
    assert!(rows[0].contains("sessions 2"), "{:?}", rows[0]);
}

#[test]
fn frame_shows_a_call_with_its_progress_bar_elapsed_time_and_message() {
    let mut state = WatchState::new(T0);
    state.set_calls(vec![call(Some(
        json!({"progress": 0.5, "message": "halfway"}),
    ))]);
    let rows = frame(&state, 120, 30);
    let row = row_with(&rows, "add_item");
    for cell in ["pixel-8", "running", "client", "█████░░░░░  50%", "halfway"] {
        assert!(row.contains(cell), "{cell:?} missing in {row:?}");
    }
    // startedAt is T0: the reply's elapsedMs (1250) until the view's clock passes it.
    assert_eq!(elapsed_ms(&state.calls[0], T0), 1250);
    assert!(row.contains("1.2s"), "{row:?}");
    state.tick(T0 + 4_000);
    assert_eq!(elapsed_ms(&state.calls[0], state.now_ms), 4_000);
    let rows = frame(&state, 120, 30);
    assert!(row_with(&rows, "add_item").contains("4.0s"));
    assert!(rows[0].contains("calls 1"), "{:?}", rows[0]);
}

#[test]
fn frame_shows_a_pending_approval_selected_with_its_keys() {
    let mut state = WatchState::new(T0);
    state.set_approvals(vec![
        approval("apr_3q2-7wEYhZr0kDx1uVb8Ag", "empty_cart"),
        approval("apr_Zz9-0000000000000000Aa", "reset"),
    ]);
    state.select_next();
    let rows = frame(&state, 140, 30);
    let selected = row_with(&rows, "apr_Zz9");
    assert!(selected.contains("> apr_Zz9"), "{selected:?}");
    assert!(
        selected.contains("reset") && selected.contains("cli"),
        "{selected:?}"
    );
    assert!(selected.contains("1m"), "expires in 90 s: {selected:?}");
    let other = row_with(&rows, "apr_3q2");
    assert!(
        !other.contains("> apr_3q2") && other.contains("empty_cart"),
        "{other:?}"
    );
    assert!(rows.iter().any(|r| r.contains("a approve")), "keys listed");
    assert_eq!(
        state.selected_approval().map(|a| a.tool.as_str()),
        Some("reset")
    );
}

#[test]
fn a_small_terminal_still_renders() {
    let mut state = WatchState::new(T0);
    state.set_sessions(vec![session("pixel-8", "active", 3)]);
    state.set_calls(vec![call(None)]);
    let rows = frame(&state, 30, 8);
    assert_eq!(rows.len(), 8);
}

#[test]
fn call_events_keep_the_calls_current() {
    let mut state = WatchState::new(T0);
    state.apply(&event(
        "tool_call_started",
        T0 + 10,
        json!({"name": "add_item", "callId": "cart-1", "wireId": "call_x", "caller": "client", "deadlineMs": 5000}),
    ));
    assert_eq!(state.calls.len(), 1);
    assert_eq!(state.calls[0].state, CallState::Running);
    assert_eq!(state.calls[0].alias.as_deref(), Some("pixel-8"));
    assert_eq!(
        state.calls[0].expires_at,
        Some((T0 + 10 + 5000).div_ceil(1000))
    );

    state.apply(&event(
        "tool_call_progress",
        T0 + 20,
        json!({"callId": "cart-1", "progress": 0.25, "message": "a quarter"}),
    ));
    assert_eq!(progress_ratio(&state.calls[0]), Some(0.25));
    assert!(!state.stale.any());

    state.apply(&event(
        "tool_call_finished",
        T0 + 1_030,
        json!({"name": "add_item", "callId": "cart-1", "caller": "client", "durationMs": 1020, "outcome": "ok"}),
    ));
    assert!(state.calls.is_empty());
    assert_eq!(state.calls_per_second().last(), Some(&1));
    assert_eq!(state.latency_ms().last(), Some(&1020));
    assert_eq!(state.events.len(), 3);
    assert!(
        state.events[2].contains("add_item ok in 1020 ms"),
        "{:?}",
        state.events[2]
    );
}

#[test]
fn progress_of_an_unknown_call_asks_for_the_list_again() {
    let mut state = WatchState::new(T0);
    state.apply(&event(
        "tool_call_progress",
        T0,
        json!({"callId": "other", "progress": 3}),
    ));
    assert!(state.stale.calls);
    state.set_calls(vec![call(Some(json!({"progress": 3})))]);
    assert!(!state.stale.calls);
    // A number outside 0–1 is shown as a number, not a bar.
    assert_eq!(progress_ratio(&state.calls[0]), None);
}

#[test]
fn approval_events_park_and_release_the_call() {
    let mut state = WatchState::new(T0);
    state.set_calls(vec![call(None)]);
    state.apply(&event(
        "approval_pending",
        T0,
        json!({"approvalId": "apr_1", "callId": "cart-1", "tool": "add_item", "caller": "client",
               "argsSha256": "44".repeat(32), "expiresAt": T0 / 1000 + 120}),
    ));
    assert_eq!(state.calls[0].state, CallState::AwaitingApproval);
    assert_eq!(state.calls[0].approval_id.as_deref(), Some("apr_1"));
    assert!(state.stale.approvals, "the list has what the event lacks");
    state.set_approvals(vec![approval("apr_1", "add_item")]);
    assert!(!state.stale.any());

    state.apply(&event(
        "approval_settled",
        T0 + 5,
        json!({"approvalId": "apr_1", "callId": "cart-1", "decision": "approved"}),
    ));
    assert!(state.approvals.is_empty());
    assert_eq!(state.calls[0].state, CallState::Running);
    assert_eq!(state.calls[0].approval_id, None);
    assert_eq!(state.selected, 0);
}

#[test]
fn session_events_mark_sessions_stale() {
    let mut state = WatchState::new(T0);
    state.apply(&event(
        "session_suspended",
        T0,
        json!({"reason": "app_backgrounded"}),
    ));
    assert!(state.stale.sessions && !state.stale.calls);
    state.set_sessions(vec![session("pixel-8", "suspended", 1)]);
    assert!(!state.stale.sessions);
}

#[test]
fn the_event_panel_and_the_rate_window_are_bounded() {
    let mut state = WatchState::new(T0);
    for i in 0..(MAX_EVENT_LINES as u64 + 50) {
        state.apply(&event(
            "tools_changed",
            T0 + i * 1000,
            json!({"toolCount": i}),
        ));
    }
    assert_eq!(state.events.len(), MAX_EVENT_LINES);
    assert_eq!(state.rate.len(), RATE_WINDOW_S);
    // Seconds are contiguous and end at the latest one.
    let seconds: Vec<u64> = state.rate.iter().map(|b| b.second).collect();
    assert!(seconds.windows(2).all(|w| w[1] == w[0] + 1));
    assert_eq!(seconds.last(), Some(&(state.now_ms / 1000)));
}

#[test]
fn app_text_is_cleaned_in_the_event_panel() {
    let mut state = WatchState::new(T0);
    state.apply(&event(
        "tool_call_progress",
        T0,
        json!({"callId": "x", "message": "evil\u{1b}[2Jtext"}),
    ));
    assert!(!state.events[0].contains('\u{1b}'), "{:?}", state.events[0]);
}

#[test]
fn the_bar_fills_in_tenths() {
    assert_eq!(view::bar(0.0), "░░░░░░░░░░   0%");
    assert_eq!(view::bar(1.0), "██████████ 100%");
    assert_eq!(view::bar(0.33), "███░░░░░░░  33%");
}

#[test]
fn frame_shows_a_cancelling_call_and_a_progress_number_outside_zero_to_one() {
    let mut state = WatchState::new(T0);
    let mut c = call(Some(json!({"progress": 42, "message": "rows"})));
    c.state = CallState::Cancelling;
    state.set_calls(vec![c]);
    let rows = frame(&state, 120, 30);
    let row = row_with(&rows, "add_item");
    assert!(
        row.contains("cancelling") && row.contains("42") && row.contains("rows"),
        "{row:?}"
    );
    assert!(
        !row.contains('█') && !row.contains('░'),
        "no bar for 42: {row:?}"
    );
}

#[test]
fn lease_events_show_and_clear_the_holder_on_the_session_row() {
    let mut state = WatchState::new(T0);
    state.set_sessions(vec![session("pixel-8", "active", 3)]);
    state.apply(&event(
        "lease_taken",
        T0,
        json!({"holder": {"client": "appduct-mcp", "pid": 4242}, "expiresAt": T0 / 1000 + 60}),
    ));
    let lease = state.sessions[0]
        .lease
        .as_ref()
        .expect("the lease is shown");
    assert_eq!(lease.holder.pid, Some(4242));
    assert!(!state.stale.sessions, "the event says enough");
    let rows = frame(&state, 240, 30);
    let row = row_with(&rows, "pixel-8");
    assert!(row.contains("appduct-mcp (pid 4242) 60s"), "{row:?}");
    assert!(row_with(&rows, "TOOLS").contains("LEASE"));
    assert!(
        state.events[0].contains("leased to appduct-mcp (pid 4242)"),
        "{:?}",
        state.events[0]
    );

    // A steal names both holders in the event panel.
    state.apply(&event(
        "lease_taken",
        T0 + 1000,
        json!({"holder": {"client": "appduct"}, "expiresAt": T0 / 1000 + 61,
               "stolenFrom": {"client": "appduct-mcp", "pid": 4242}}),
    ));
    assert!(
        state.events[1].contains("leased to appduct, taken from appduct-mcp (pid 4242)"),
        "{:?}",
        state.events[1]
    );
    state.apply(&event(
        "lease_released",
        T0 + 2000,
        json!({"holder": {"client": "appduct"}, "reason": "disconnected"}),
    ));
    assert_eq!(state.sessions[0].lease, None);
    assert!(state.events[2].contains("lease of appduct ended (disconnected)"));
    let rows = frame(&state, 240, 30);
    assert!(
        !row_with(&rows, "pixel-8").contains("appduct ("),
        "lease cleared"
    );
    assert!(
        !row_with(&rows, "TOOLS").contains("LEASE"),
        "no lease, no column"
    );

    // A lease on a session the view has not seen yet: ask sessions.list again.
    let mut fresh = WatchState::new(T0);
    fresh.apply(&event(
        "lease_taken",
        T0,
        json!({"holder": {"client": "x"}, "expiresAt": T0 / 1000 + 5}),
    ));
    assert!(fresh.stale.sessions);
}
