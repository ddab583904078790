//! The tool cache of `appduct_call_tool` (§M8.5 steps 2–4, ARCHITECTURE.md "MCP bridge"):
//! the registry entry is looked up once per session and tool, every call still resolves its
//! selector, and every change the daemon announces (`tools_changed`, `session_*`) is seen by
//! the next call, never a stale entry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use appduct_client::command_runner::ScriptedCommandRunner;
use appduct_mcp::catalog;
use appduct_protocol::control::{PolicyDecision, SessionState, ToolsListEntry};
use rmcp::model::{CallToolRequestParams, CallToolResult, ElicitationAction, ProtocolVersion};
use serde_json::{Value, json};
use support::*;
use tokio::sync::{mpsc, oneshot};

const ID: &str = "q3VfZ0xkR2ptTnB4";
const NEW_ID: &str = "Zk3pQ0mX8sL1vB2n";
const ALIAS: &str = "pixel-8";

const METHODS: [&str; 4] = [
    "sessions.describe",
    "tools.list",
    "tools.call",
    "events.subscribe",
];

fn v2025() -> TestClient {
    TestClient::new(ProtocolVersion::V_2025_11_25, None)
}

fn sum(timeout_ms: u64) -> ToolsListEntry {
    tool(
        json!({"name": "sum", "description": "Add.", "timeout_ms": timeout_ms}),
        PolicyDecision::Allow,
    )
}

fn wipe(policy: PolicyDecision) -> ToolsListEntry {
    tool(
        json!({"name": "wipe", "description": "", "annotations": {"destructiveHint": true}}),
        policy,
    )
}

/// Replaces the session's registry, then announces it as the daemon does.
fn register(fake: &FakeDaemon, session_id: &str, tools: Vec<ToolsListEntry>) {
    let count = tools.len();
    fake.state
        .lock()
        .unwrap()
        .tools
        .insert(session_id.to_owned(), tools);
    emit(
        fake,
        "tools_changed",
        session_id,
        json!({ "toolCount": count }),
    );
}

fn emit(fake: &FakeDaemon, kind: &str, session_id: &str, data: Value) {
    fake.emit(
        json!({"kind": kind, "sessionId": session_id, "alias": ALIAS, "ts": 1, "seq": 0,
                     "data": data}),
    );
}

fn set_state(fake: &FakeDaemon, state: SessionState) {
    let mut st = fake.state.lock().unwrap();
    let s = st.sessions.iter_mut().find(|s| s.session_id == ID).unwrap();
    s.state = state;
}

async fn call(h: &Harness, args: Value) -> CallToolResult {
    h.call(catalog::CALL_TOOL, args).await
}

#[tokio::test]
async fn each_call_resolves_its_selector_and_the_entry_is_looked_up_once() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let h = start(fake.clone(), v2025()).await;
    for _ in 0..3 {
        let r = call(&h, json!({"selector": ALIAS, "name": "sum"})).await;
        assert_eq!(structured(&r), json!({"ok": true}));
    }
    // One subscription, on the persistent connection, to the kinds that change an entry.
    assert_eq!(
        fake.requests("events.subscribe"),
        [
            json!({"kinds": ["tools_changed", "session_suspended", "session_resumed",
                          "session_revoked", "session_expired"]})
        ]
    );
    assert_eq!(
        fake.connections.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    // Two round trips per call once the entry is known: describe, then the call.
    assert_eq!(
        fake.methods(),
        [
            "events.subscribe",
            "sessions.describe",
            "tools.list",
            "tools.call",
            "sessions.describe",
            "tools.call",
            "sessions.describe",
            "tools.call",
        ]
    );
    assert_eq!(
        fake.requests("tools.list"),
        [json!({"selector": ID, "filter": "sum"})],
        "the lookup asks for the name only"
    );
    for sent in fake.requests("tools.call") {
        assert_eq!(sent["timeoutMs"], 30_000, "the cached deadline");
        assert_eq!(sent["selector"], ID);
    }
}

#[tokio::test]
async fn a_tool_registered_after_a_call_is_found() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let h = start(fake.clone(), v2025()).await;
    let r = call(&h, json!({"name": "later"})).await;
    assert_eq!(error_type(&r), "tool_not_found");
    let r = call(&h, json!({"name": "sum"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    let later = tool(
        json!({"name": "later", "description": ""}),
        PolicyDecision::Allow,
    );
    register(&fake, ID, vec![sum(30_000), later]);
    let r = call(&h, json!({"name": "later"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    let called: Vec<Value> = fake
        .requests("tools.call")
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(called, ["sum", "later"]);
}

#[tokio::test]
async fn a_changed_tool_is_looked_up_again_and_its_new_deadline_applies() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let h = start(fake.clone(), v2025()).await;
    let r = call(&h, json!({"name": "sum", "timeoutMs": 20_000})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    // The app shortens the tool's deadline: 20 s no longer fits.
    register(&fake, ID, vec![sum(5_000)]);
    let r = call(&h, json!({"name": "sum", "timeoutMs": 20_000})).await;
    assert_eq!(error_type(&r), "invalid_request");
    assert_eq!(
        error_details(&r),
        json!({"param": "timeoutMs", "deadlineMs": 5_000})
    );
    assert_eq!(fake.requests("tools.call").len(), 1, "nothing sent");
    assert_eq!(fake.requests("tools.list").len(), 2);
    let r = call(&h, json!({"name": "sum"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert_eq!(fake.requests("tools.call")[1]["timeoutMs"], 5_000);
}

#[tokio::test]
async fn a_removed_tool_is_not_found_and_no_call_is_sent() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let h = start(fake.clone(), v2025()).await;
    let r = call(&h, json!({"name": "sum"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    register(&fake, ID, Vec::new());
    let r = call(&h, json!({"name": "sum"})).await;
    assert_eq!(error_type(&r), "tool_not_found");
    assert_eq!(
        error_details(&r),
        json!({"name": "sum", "session": ALIAS, "sessionId": ID})
    );
    assert_eq!(
        fake.requests("tools.call").len(),
        1,
        "the removed tool never reaches the daemon"
    );
}

/// A prompt-policy call whose consent request the test answers.
async fn prompted(
    h: &Harness,
    prompts: &mut Prompts,
    args: Value,
    answer: ElicitationAction,
) -> CallToolResult {
    let peer = h.client.peer().clone();
    let params = CallToolRequestParams::new(catalog::CALL_TOOL).with_arguments(obj(args));
    let pending = tokio::spawn(async move { peer.call_tool(params).await.unwrap() });
    let (message, reply) = tokio::time::timeout(Duration::from_secs(10), prompts.recv())
        .await
        .expect("the bridge asked for consent")
        .unwrap();
    assert!(message.contains("\"wipe\""), "{message}");
    reply.send(answer).unwrap();
    pending.await.unwrap()
}

/// Consent prompts the test answers itself, one `(message, reply)` per prompt.
type Prompts = mpsc::UnboundedReceiver<(String, oneshot::Sender<ElicitationAction>)>;

/// The bridge against `fake`, with a client whose elicitations the test answers.
async fn start_prompting(fake: &Arc<FakeDaemon>) -> (Harness, Prompts) {
    let (tx, prompts) = mpsc::unbounded_channel();
    let h = start(
        fake.clone(),
        TestClient::new(ProtocolVersion::V_2025_11_25, Some(Elicit::Manual(tx))),
    )
    .await;
    (h, prompts)
}

#[tokio::test]
async fn a_policy_change_is_respected_both_ways() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![wipe(PolicyDecision::Allow)]);
    let (h, mut prompts) = start_prompting(&fake).await;
    let r = call(&h, json!({"name": "wipe"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert!(prompts.try_recv().is_err(), "allow asks nobody");
    // The app re-registers the tool and the daemon's policy for it becomes "prompt".
    register(&fake, ID, vec![wipe(PolicyDecision::Prompt)]);
    let r = prompted(
        &h,
        &mut prompts,
        json!({"name": "wipe"}),
        ElicitationAction::Decline,
    )
    .await;
    assert_eq!(error_type(&r), "consent_declined");
    assert_eq!(
        fake.requests("tools.call").len(),
        1,
        "declined: nothing sent"
    );
    // And back to "allow": no prompt, no consent claimed.
    register(&fake, ID, vec![wipe(PolicyDecision::Allow)]);
    let r = call(&h, json!({"name": "wipe"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert!(prompts.try_recv().is_err());
    let sent = fake.requests("tools.call");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].get("consent"), None);
}

#[tokio::test]
async fn a_session_that_changes_state_or_owner_is_resolved_again() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![wipe(PolicyDecision::Prompt)]);
    let (h, mut prompts) = start_prompting(&fake).await;
    let args = json!({"selector": ALIAS, "name": "wipe"});
    let r = prompted(&h, &mut prompts, args.clone(), ElicitationAction::Accept).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert_eq!(fake.requests("tools.call")[0]["consent"], "elicitation");

    // Suspended: no prompt, the daemon answers the session error (§M8.5 step 5).
    set_state(&fake, SessionState::Suspended);
    emit(
        &fake,
        "session_suspended",
        ID,
        json!({"reason": "app_backgrounded"}),
    );
    let r = call(&h, args.clone()).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert!(prompts.try_recv().is_err(), "no prompt while suspended");
    assert_eq!(fake.requests("tools.call")[1].get("consent"), None);

    // Resumed: asked again.
    set_state(&fake, SessionState::Active);
    emit(
        &fake,
        "session_resumed",
        ID,
        json!({"replacedSocket": false}),
    );
    let r = prompted(&h, &mut prompts, args.clone(), ElicitationAction::Accept).await;
    assert_eq!(structured(&r), json!({"ok": true}));

    // Revoked, and a new device inherits the alias with an "allow" tool of that name: the
    // alias routes to the new id, whose own entry decides.
    fake.remove_session(ID);
    emit(
        &fake,
        "session_revoked",
        ID,
        json!({"previousState": "active"}),
    );
    fake.add_session(session(NEW_ID, ALIAS), vec![wipe(PolicyDecision::Allow)]);
    emit(
        &fake,
        "session_claimed",
        NEW_ID,
        json!({"device": {}, "transport": "native"}),
    );
    let r = call(&h, args).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert!(
        prompts.try_recv().is_err(),
        "the new session's tool is allow"
    );
    let sent = fake.requests("tools.call");
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[3]["selector"], NEW_ID);
    assert_eq!(
        fake.requests("tools.list").last().unwrap()["selector"],
        NEW_ID
    );
    assert_eq!(fake.requests("sessions.describe").len(), 4, "one per call");
}

#[tokio::test]
async fn an_entry_looked_up_while_the_registry_changed_is_not_kept() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let gate = fake.hold("tools.list");
    let bridge = bridge_with_runner(&fake, Arc::new(ScriptedCommandRunner::new()));
    let h = start_bridge(bridge, fake.clone(), v2025()).await;
    let peer = h.client.peer().clone();
    let first = tokio::spawn(async move {
        let params = CallToolRequestParams::new(catalog::CALL_TOOL)
            .with_arguments(obj(json!({"name": "sum"})));
        peer.call_tool(params).await.unwrap()
    });
    // The answer to the first lookup is taken from the old registry and held back; the change
    // is announced before it arrives.
    gate.entered().await;
    register(&fake, ID, vec![sum(5_000)]);
    gate.open();
    let r = first.await.unwrap();
    assert_eq!(structured(&r), json!({"ok": true}));
    assert_eq!(fake.requests("tools.call")[0]["timeoutMs"], 30_000);
    let r = call(&h, json!({"name": "sum"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    assert_eq!(fake.requests("tools.list").len(), 2, "looked up again");
    assert_eq!(fake.requests("tools.call")[1]["timeoutMs"], 5_000);
}

#[tokio::test]
async fn without_a_subscription_every_call_looks_the_tool_up() {
    let fake = FakeDaemon::new(&["sessions.describe", "tools.list", "tools.call"]);
    fake.refuse("events.subscribe");
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let h = start(fake.clone(), v2025()).await;
    for _ in 0..2 {
        let r = call(&h, json!({"name": "sum"})).await;
        assert_eq!(structured(&r), json!({"ok": true}));
    }
    assert_eq!(
        fake.methods(),
        [
            "events.subscribe",
            "sessions.describe",
            "tools.list",
            "tools.call",
            "sessions.describe",
            "tools.list",
            "tools.call",
        ],
        "asked once per connection, then the uncached path"
    );
}

#[tokio::test]
async fn a_new_connection_starts_an_empty_cache() {
    let fake = FakeDaemon::new(&METHODS);
    fake.add_session(session(ID, ALIAS), vec![sum(30_000)]);
    let h = start(fake.clone(), v2025()).await;
    let r = call(&h, json!({"name": "sum"})).await;
    assert_eq!(structured(&r), json!({"ok": true}));
    // The daemon goes away (a restart): events may have been missed in between.
    fake.close_subscribers();
    let mut r = call(&h, json!({"name": "sum"})).await;
    if r.is_error == Some(true) {
        // The close had not reached the bridge yet; it has now.
        assert_eq!(error_type(&r), "connection_error");
        r = call(&h, json!({"name": "sum"})).await;
    }
    assert_eq!(structured(&r), json!({"ok": true}));
    assert_eq!(
        fake.connections.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    assert_eq!(fake.requests("events.subscribe").len(), 2);
    assert_eq!(fake.requests("tools.list").len(), 2, "nothing reused");
}
