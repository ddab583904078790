//! Shared harness of the session-engine tests: an engine with in-memory device sockets, a
//! manual wall clock, a bus tap to synchronise on, and a recording call router. Tests run with a
//! paused tokio clock and wait on bus events or app-side events, never on sleeps.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use appduct_daemon::clock::ManualClock;
use appduct_daemon::device_socket::{AppEvent, MemoryApp, memory_device_pair};
use appduct_daemon::events::EventBus;
use appduct_daemon::links::StaticLinkEnv;
use appduct_daemon::sessions::{CallFrame, CallRouter, CallsEnded, EngineOptions, SessionManager};
use appduct_protocol::bootstrap;
use appduct_protocol::control::{
    EventKind, EventNotification, LinkCreateParams, LinkCreateResult, Transport,
};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

pub const START_MS: u64 = 1_764_493_923_120;
/// Generous bound on any single wait; with a paused clock it only matters when a test is wrong.
pub const WAIT: Duration = Duration::from_secs(24 * 3600);

/// What the recording router saw.
#[derive(Debug, Clone, PartialEq)]
pub enum RouterCall {
    Frame(String, CallFrame),
    Ended(String, CallsEnded),
}

#[derive(Debug, Default)]
pub struct RecordingRouter {
    pub calls: Mutex<Vec<RouterCall>>,
}

impl RecordingRouter {
    pub fn take(&self) -> Vec<RouterCall> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl CallRouter for RecordingRouter {
    fn on_call_frame(&self, session_id: &str, frame: CallFrame) {
        self.calls
            .lock()
            .unwrap()
            .push(RouterCall::Frame(session_id.to_owned(), frame));
    }

    fn on_session_ended_calls(&self, session_id: &str, why: CallsEnded) {
        self.calls
            .lock()
            .unwrap()
            .push(RouterCall::Ended(session_id.to_owned(), why));
    }
}

pub struct Harness {
    pub mgr: SessionManager,
    pub bus: EventBus,
    pub events: UnboundedReceiver<EventNotification>,
    pub clock: ManualClock,
    pub router: Arc<RecordingRouter>,
}

/// A claimed session as the app sees it.
pub struct Claimed {
    pub app: MemoryApp,
    pub session_id: String,
    pub alias: String,
    pub resume_token: String,
    pub ack: Value,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_options(EngineOptions::default(), 256)
    }

    pub fn with_options(options: EngineOptions, buffer_size: usize) -> Self {
        let clock = ManualClock::new(START_MS);
        let bus = EventBus::new(Arc::new(clock.clone()), buffer_size);
        let events = bus.subscribe_all();
        let mgr = SessionManager::new(
            options,
            bus.clone(),
            Arc::new(clock.clone()),
            Arc::new(StaticLinkEnv::default()),
        );
        let router = Arc::new(RecordingRouter::default());
        mgr.set_router(router.clone());
        Self {
            mgr,
            bus,
            events,
            clock,
            router,
        }
    }

    /// `link.create` with these params; returns the result and the claim token (base64url).
    pub fn link(&self, params: Value) -> (LinkCreateResult, String) {
        let params = LinkCreateParams::validate(Some(&params)).unwrap();
        let result = self.mgr.create_link(&params).unwrap();
        let token = bootstrap::decode(&result.deep_link_payload)
            .unwrap()
            .token
            .to_base64url();
        (result, token)
    }

    /// A new device connection on `transport`, with a pre-claim deadline 10 s from now.
    pub fn connect(&self, transport: Transport) -> MemoryApp {
        self.connect_with_guard(transport, ())
    }

    pub fn connect_with_guard<G: Send + 'static>(
        &self,
        transport: Transport,
        guard: G,
    ) -> MemoryApp {
        let (socket, app) = memory_device_pair();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        self.mgr
            .spawn_connection(socket, transport, deadline, guard);
        app
    }

    /// The next bus notification.
    pub async fn next_event(&mut self) -> EventNotification {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("no bus event")
            .expect("bus closed")
    }

    /// The next bus notification of `kind`, skipping others.
    pub async fn event_of(&mut self, kind: EventKind) -> EventNotification {
        loop {
            let e = self.next_event().await;
            if e.kind() == kind {
                return e;
            }
        }
    }

    /// The bus notifications emitted so far and not yet read.
    pub fn drain_events(&mut self) -> Vec<EventNotification> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }

    /// Mints a native link and claims it with `model`, after discarding earlier bus events.
    pub async fn claim(&mut self, model: Option<&str>) -> Claimed {
        self.claim_on(Transport::Native, model).await
    }

    pub async fn claim_on(&mut self, transport: Transport, model: Option<&str>) -> Claimed {
        let (link, token) = self.link(json!({"transport": transport.as_str()}));
        let mut app = self.connect(transport);
        app.send_text(claim_frame(&link.session_id, &token, model).to_string())
            .await
            .unwrap();
        let ack = expect_text(&mut app).await;
        assert_eq!(ack["type"], "session_ack", "{ack}");
        self.event_of(EventKind::SessionClaimed).await;
        Claimed {
            app,
            session_id: link.session_id,
            alias: ack["alias"].as_str().unwrap().to_owned(),
            resume_token: ack["resume_token"].as_str().unwrap().to_owned(),
            ack,
        }
    }

    /// Resumes `session_id` on a new connection; returns the app and the ack.
    pub async fn resume(
        &mut self,
        transport: Transport,
        session_id: &str,
        resume_token: &str,
    ) -> (MemoryApp, Value) {
        let mut app = self.connect(transport);
        app.send_text(resume_frame(session_id, resume_token).to_string())
            .await
            .unwrap();
        let ack = expect_text(&mut app).await;
        (app, ack)
    }
}

pub fn claim_frame(session_id: &str, token: &str, model: Option<&str>) -> Value {
    let mut frame = json!({"type": "session_claim", "protocol_version": 2,
                           "session_id": session_id, "token": token,
                           "device_manufacturer": "Google", "device_os": "Android 15"});
    if let Some(model) = model {
        frame["device_model"] = json!(model);
    }
    frame
}

pub fn resume_frame(session_id: &str, resume_token: &str) -> Value {
    json!({"type": "session_resume", "protocol_version": 2,
           "session_id": session_id, "resume_token": resume_token})
}

/// The next thing the daemon did to the app, skipping keepalive pings.
pub async fn next(app: &mut MemoryApp) -> AppEvent {
    loop {
        let event = tokio::time::timeout(WAIT, app.recv())
            .await
            .expect("the daemon did nothing");
        if !matches!(event, AppEvent::Ping(_)) {
            return event;
        }
    }
}

/// The next text message, parsed.
pub async fn expect_text(app: &mut MemoryApp) -> Value {
    match next(app).await {
        AppEvent::Text(text) => serde_json::from_str(&text).unwrap(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

/// The next close frame, as `(code, reason)`.
pub async fn expect_close(app: &mut MemoryApp) -> (u16, String) {
    match next(app).await {
        AppEvent::Close { code, reason } => (code, reason),
        other => panic!("expected a close frame, got {other:?}"),
    }
}

/// Asserts the next daemon action is a close with `code` and `reason`.
pub async fn assert_closed(app: &mut MemoryApp, code: u16, reason: &str) {
    assert_eq!(expect_close(app).await, (code, reason.to_owned()));
}

/// Lets every ready task run without moving the clock.
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}
