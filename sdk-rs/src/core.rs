//! The session core: a sans-IO state machine for the app side of appduct v2 (§D13).
//!
//! The core owns every rule of the app side (claim, resume, backoff, grace, close
//! classification, registries and their snapshots and deltas, call deadlines and cancels,
//! keepalive, background and foreground) and no I/O at all. It is driven by inputs (frames and
//! closes of connections, timer fires, app actions), each taking the current time in unix
//! milliseconds, and it answers with [`Output`]s the driver executes in order: open or close a
//! connection, write a frame, report a state, start or cancel a handler. Timers are absolute
//! deadlines: the driver calls [`Core::on_timeout`] once [`Core::poll_timeout`] has passed.
//!
//! The tokio [`crate::Client`] is one driver; the conformance runner is another, with a manual
//! clock, which is what makes the session-scenario vectors (§D15) deterministic.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;

use appduct_protocol::close;
use appduct_protocol::control::Transport;
use appduct_protocol::descriptor::{EventDescriptor, ToolDescriptor};
use appduct_protocol::frames::{
    AppFrame, DaemonFrame, DeviceInfo, EventDelta, EventFrame, EventRegistryDelta,
    EventRegistrySnapshot, FrameTooLarge, SessionAck, SessionClaim, SessionResume, ToolCall,
    ToolCallProgress, ToolCancel, ToolDelta, ToolErrorBody, ToolErrorType, ToolRegistryDelta,
    ToolRegistrySnapshot, ToolResult, check_outgoing_size, decode_daemon_message,
};
use appduct_protocol::limits::{
    BACKOFF_BASE_MS, BACKOFF_CAP_MS, MAX_DEVICE_FIELD_LEN, MAX_FREE_TEXT_LEN, MAX_MESSAGE_BYTES,
};
use appduct_protocol::parts::{encode_body, split_body};
use appduct_protocol::pin::SpkiPin;
use appduct_protocol::text::{truncate_utf16, utf16_len_within};
use serde_json::{Map, Number, Value, json};

use crate::registry::{RegistrationId, Registry};
use crate::types::{
    ClientState, ConnectError, ErrorPhase, ErrorReport, EventError, RegistrationError,
    SessionEvent, SessionInfo, ToolError, ToolOutput, abort_reasons, reasons,
};

/// Identifies one connection attempt of a core.
pub type ConnId = u64;
/// Identifies one `connect` of a core, so its outcome reaches the right caller.
pub type ConnectId = u64;
/// The jitter source of the backoff: uniform in [0, 1).
pub type Random = Box<dyn FnMut() -> f64 + Send>;

/// Where connections go: the listener, its address and, for `wss://`, the trusted pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub transport: Transport,
    pub address: IpAddr,
    pub port: u16,
    /// Pins the presented leaf must match (native only).
    pub pins: Vec<SpkiPin>,
    /// The daemon's X25519 static key (sealed only, issue #23): the handshake authenticates
    /// the daemon by it.
    pub sealed_key: Option<[u8; 32]>,
}

impl Endpoint {
    /// `wss://addr:port/` or `ws://addr:port/`, IPv6 literals bracketed (§D13.1).
    pub fn url(&self) -> String {
        let scheme = match self.transport {
            Transport::Native => "wss",
            Transport::Web | Transport::Sealed => "ws",
        };
        match self.address {
            IpAddr::V4(v4) => format!("{scheme}://{v4}:{}/", self.port),
            IpAddr::V6(v6) => format!("{scheme}://[{v6}]:{}/", self.port),
        }
    }
}

/// A decoded bootstrap the core claims with. `token` is sent verbatim as
/// `session_claim.token`; no link rule is checked here (§T2.1 `connectBootstrap`).
#[derive(Clone)]
pub struct Bootstrap {
    pub session_id: String,
    pub token: String,
    /// Unix seconds; a retry due at or after it gives up (§D13.1).
    pub expires_at: u64,
    pub endpoint: Endpoint,
}

impl fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bootstrap")
            .field("session_id", &self.session_id)
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// Why a connection never opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenFailure {
    /// The leaf's SPKI pin is not trusted: terminal, never retried (§D3.4).
    PinMismatch,
    /// The sealed handshake failed (the daemon does not hold the link's key): terminal, never
    /// retried, like a pin mismatch.
    HandshakeFailed,
    /// Anything else (refused, unreachable, TLS or upgrade failure): retried.
    Other(String),
}

/// A call the driver must run: the handler registered under `registration`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallStart {
    /// The daemon's wire id.
    pub id: String,
    pub name: String,
    pub registration: RegistrationId,
    /// `args` of the `tool_call` frame as received.
    pub args: Map<String, Value>,
    /// Whether the tool declares an input schema. Without one, `args` is always empty and the
    /// handler gets `null` (§T5.2 gives `undefined`).
    pub has_input_schema: bool,
    pub session_id: String,
    pub received_at_ms: u64,
    /// The app-side deadline in force, in milliseconds.
    pub timeout_ms: u64,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Open a connection to `endpoint`, then report [`Core::on_open`] or
    /// [`Core::on_open_failed`].
    Open {
        conn: ConnId,
        endpoint: Endpoint,
    },
    /// Write one text frame (already size-checked).
    Send {
        conn: ConnId,
        text: String,
    },
    /// Write a WebSocket ping; report the pong with [`Core::on_pong`].
    Ping {
        conn: ConnId,
    },
    /// Close with a close frame; the core has already forgotten the connection.
    Close {
        conn: ConnId,
        code: u16,
        reason: String,
    },
    /// Drop the connection without a close frame (it never opened, or a pong was missed).
    Abort {
        conn: ConnId,
    },
    /// The client state changed.
    State(ClientState),
    Session(SessionEvent),
    /// Run a handler.
    CallStarted(CallStart),
    /// Abort a running handler with `reason`; nothing more is sent for the call.
    CallCancelled {
        id: String,
        reason: String,
    },
    /// A `connect` finished: acked, or failed without an ack.
    ConnectFinished {
        connect: ConnectId,
        result: Result<SessionInfo, ConnectError>,
    },
    /// A report for the app's error listener.
    Error(ErrorReport),
}

#[derive(Debug, Clone, Copy)]
struct Conn {
    id: ConnId,
    opened: bool,
    acked: bool,
}

/// The current connection attempt and the retry schedule around it.
#[derive(Debug, Default)]
struct Attempts {
    conn: Option<Conn>,
    /// Consecutive failed attempts since `connect` or the last ack (§D13.2).
    attempt: u32,
    retry_at: Option<u64>,
}

impl Attempts {
    fn current(&self, conn: ConnId) -> Option<Conn> {
        self.conn.filter(|c| c.id == conn)
    }

    fn current_mut(&mut self, conn: ConnId) -> Option<&mut Conn> {
        self.conn.as_mut().filter(|c| c.id == conn)
    }
}

#[derive(Debug)]
struct Claiming {
    target: Bootstrap,
    connect: ConnectId,
    tries: Attempts,
}

#[derive(Debug, Clone, Copy)]
struct Keepalive {
    next_at: u64,
    awaiting_pong: bool,
}

/// A session the app holds: acked at least once, not yet lost.
struct Held {
    session_id: String,
    alias: String,
    resume_token: String,
    grace_ms: u64,
    keepalive_ms: u64,
    event_registry: bool,
    /// Issue #17 (§D17): the latest ack's `result_content` and `result_parts_max_bytes`.
    result_content: bool,
    result_parts_max_bytes: Option<u64>,
    endpoint: Endpoint,
    tries: Attempts,
    /// When the transport was first lost since the last ack (grace runs from here).
    lost_at: Option<u64>,
    keepalive: Option<Keepalive>,
}

// The resume token never reaches logs (§D9.5).
impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("session_id", &self.session_id)
            .field("alias", &self.alias)
            .field("resume_token", &"<redacted>")
            .field("tries", &self.tries)
            .field("lost_at", &self.lost_at)
            .finish_non_exhaustive()
    }
}

impl Held {
    fn is_active(&self) -> bool {
        self.tries.conn.is_some_and(|c| c.acked)
    }

    fn info(&self) -> SessionInfo {
        SessionInfo {
            session_id: self.session_id.clone(),
            alias: self.alias.clone(),
        }
    }

    fn grace_deadline(&self) -> Option<u64> {
        self.lost_at.map(|t| t.saturating_add(self.grace_ms))
    }
}

#[derive(Debug)]
enum Mode {
    Idle,
    Claiming(Claiming),
    Held(Held),
    Closed { reason: String },
}

#[derive(Debug)]
struct InFlight {
    name: String,
    seq: u64,
    deadline: u64,
    timeout_ms: u64,
    has_output_schema: bool,
}

/// Timers in the order they fire when due at the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Call,
    Keepalive,
    Grace,
    Retry,
}

/// The app-side session machine. See the module docs.
pub struct Core {
    device: DeviceInfo,
    random: Random,
    mode: Mode,
    reported: ClientState,
    foreground: bool,
    tools: Registry<ToolDescriptor>,
    events: Registry<EventDescriptor>,
    calls: HashMap<String, InFlight>,
    /// `(deadline, seq)` → call id, so the earliest deadline is the first key.
    deadlines: BTreeMap<(u64, u64), String>,
    next_conn: ConnId,
    next_connect: ConnectId,
    next_registration: RegistrationId,
    next_call_seq: u64,
    outputs: VecDeque<Output>,
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("state", &self.reported)
            .field("foreground", &self.foreground)
            .field("tools", &self.tools.len())
            .field("events", &self.events.len())
            .field("calls", &self.calls.len())
            .finish_non_exhaustive()
    }
}

/// Full-jitter backoff of §D13.2: `floor(r * min(30000, 500 * 2^a))`.
pub fn backoff_delay_ms(attempt: u32, r: f64) -> u64 {
    let ceiling = BACKOFF_BASE_MS
        .checked_shl(attempt)
        .filter(|v| *v >> attempt == BACKOFF_BASE_MS)
        .map_or(BACKOFF_CAP_MS, |v| v.min(BACKOFF_CAP_MS));
    let r = if r.is_finite() {
        r.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // r < 1 keeps the product below the ceiling; the cast floors it.
    ((r * ceiling as f64) as u64).min(ceiling.saturating_sub(1))
}

fn device_field(v: Option<String>) -> Option<String> {
    v.map(|s| truncate_utf16(&s, MAX_DEVICE_FIELD_LEN).to_owned())
        .filter(|s| !s.is_empty())
}

fn reason_or_rejected(reason: Option<&str>) -> String {
    match reason {
        Some(r) if !r.is_empty() => r.to_owned(),
        _ => reasons::REJECTED_BY_DAEMON.to_owned(),
    }
}

fn tool_error_frame(session_id: &str, id: &str, body: ToolErrorBody) -> AppFrame {
    AppFrame::ToolError(appduct_protocol::frames::ToolError::new(
        session_id.to_owned(),
        id.to_owned(),
        body,
    ))
}

fn error_body(error_type: ToolErrorType, message: &str, details: Option<Value>) -> ToolErrorBody {
    ToolErrorBody::new(
        error_type,
        truncate_utf16(message, MAX_FREE_TEXT_LEN).to_owned(),
    )
    .with_details(details)
}

impl Core {
    /// A fresh core in state `idle`, in the foreground. Device fields are cut to 256 UTF-16
    /// code units and empty ones dropped (§T7.3).
    pub fn new(device: DeviceInfo, random: Random) -> Self {
        Self {
            device: DeviceInfo::default()
                .with_manufacturer(device_field(device.manufacturer))
                .with_model(device_field(device.model))
                .with_os(device_field(device.os)),
            random,
            mode: Mode::Idle,
            reported: ClientState::Idle,
            foreground: true,
            tools: Registry::default(),
            events: Registry::default(),
            calls: HashMap::new(),
            deadlines: BTreeMap::new(),
            next_conn: 0,
            next_connect: 0,
            next_registration: 0,
            next_call_seq: 0,
            outputs: VecDeque::new(),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Outputs and queries
    // -----------------------------------------------------------------------------------------

    /// The next thing the driver must do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The earliest timer deadline (unix ms), if any timer is armed.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.next_timer().map(|(at, _)| at)
    }

    /// The last reported state.
    pub fn state(&self) -> &ClientState {
        &self.reported
    }

    /// The held session (active or reconnecting).
    pub fn session(&self) -> Option<SessionInfo> {
        match &self.mode {
            Mode::Held(h) => Some(h.info()),
            _ => None,
        }
    }

    /// The connection that is open now (claimed, resuming or acked), if any.
    pub fn open_connection(&self) -> Option<ConnId> {
        self.attempts()
            .and_then(|t| t.conn)
            .filter(|c| c.opened)
            .map(|c| c.id)
    }

    pub fn is_foreground(&self) -> bool {
        self.foreground
    }

    /// Registered tools in wire form, in registration order.
    pub fn tools(&self) -> Vec<ToolDescriptor> {
        self.tools.descriptors().cloned().collect()
    }

    /// Declared events in wire form, in declaration order.
    pub fn events(&self) -> Vec<EventDescriptor> {
        self.events.descriptors().cloned().collect()
    }

    /// The descriptor of the tool registered under `name`, and its registration.
    pub fn tool(&self, name: &str) -> Option<(RegistrationId, &ToolDescriptor)> {
        self.tools.get(name)
    }

    fn push(&mut self, out: Output) {
        self.outputs.push_back(out);
    }

    fn attempts(&self) -> Option<&Attempts> {
        match &self.mode {
            Mode::Claiming(c) => Some(&c.tries),
            Mode::Held(h) => Some(&h.tries),
            _ => None,
        }
    }

    fn attempts_mut(&mut self) -> Option<&mut Attempts> {
        match &mut self.mode {
            Mode::Claiming(c) => Some(&mut c.tries),
            Mode::Held(h) => Some(&mut h.tries),
            _ => None,
        }
    }

    /// The held session while its socket is acked.
    fn active(&self) -> Option<&Held> {
        match &self.mode {
            Mode::Held(h) if h.is_active() => Some(h),
            _ => None,
        }
    }

    fn derived_state(&self) -> ClientState {
        match &self.mode {
            Mode::Idle => ClientState::Idle,
            Mode::Claiming(_) => ClientState::Connecting,
            Mode::Held(h) if h.is_active() => ClientState::Active,
            Mode::Held(_) => ClientState::Reconnecting,
            Mode::Closed { reason } => ClientState::Closed {
                reason: reason.clone(),
            },
        }
    }

    /// Reports the state if it changed (§D13.1: only changes are reported).
    fn sync_state(&mut self) {
        let state = self.derived_state();
        if state != self.reported {
            self.reported = state.clone();
            self.push(Output::State(state));
        }
    }

    fn error(&mut self, phase: ErrorPhase, code: &str, message: String) {
        self.push(Output::Error(ErrorReport {
            phase,
            code: Some(code.to_owned()),
            message,
            tool_name: None,
            call_id: None,
        }));
    }

    /// Encodes, size-checks (§D13.6) and queues one frame.
    fn send(&mut self, conn: ConnId, frame: &AppFrame) -> Result<(), FrameTooLarge> {
        let text = frame.encode();
        check_outgoing_size(&text)?;
        self.push(Output::Send { conn, text });
        Ok(())
    }

    /// Sends on the acked socket, if there is one.
    fn send_active(&mut self, frame: &AppFrame) -> Result<(), FrameTooLarge> {
        match self.active().and_then(|h| h.tries.conn) {
            Some(conn) => self.send(conn.id, frame),
            None => Ok(()),
        }
    }

    /// Lets go of a connection the core no longer uses: a close frame if it opened, else a
    /// plain drop.
    fn release(&mut self, conn: Option<Conn>, code: u16, reason: &str) {
        match conn {
            Some(c) if c.opened => self.push(Output::Close {
                conn: c.id,
                code,
                reason: reason.to_owned(),
            }),
            Some(c) => self.push(Output::Abort { conn: c.id }),
            None => {}
        }
    }

    // -----------------------------------------------------------------------------------------
    // Connecting
    // -----------------------------------------------------------------------------------------

    /// Starts a claim (§T2.1 `connectBootstrap`). A held or claiming session is
    /// superseded: its connect fails with `superseded`, its calls abort with `closed`, its
    /// socket closes with 1000, and a held session is reported `lost` (`superseded`).
    pub fn connect_bootstrap(&mut self, target: Bootstrap) -> ConnectId {
        self.next_connect += 1;
        let connect = self.next_connect;
        let claim = Claiming {
            target,
            connect,
            tries: Attempts::default(),
        };
        match std::mem::replace(&mut self.mode, Mode::Claiming(claim)) {
            Mode::Claiming(old) => {
                self.push(Output::ConnectFinished {
                    connect: old.connect,
                    result: Err(ConnectError::Superseded),
                });
                self.release(old.tries.conn, close::NORMAL, reasons::SUPERSEDED);
                self.sync_state();
            }
            Mode::Held(old) => {
                self.sync_state();
                self.push(Output::Session(SessionEvent::Lost {
                    reason: reasons::SUPERSEDED.to_owned(),
                }));
                self.abort_calls(abort_reasons::CLOSED);
                self.release(old.tries.conn, close::NORMAL, reasons::SUPERSEDED);
            }
            Mode::Idle | Mode::Closed { .. } => self.sync_state(),
        }
        self.open_attempt();
        connect
    }

    /// Opens a new connection for the claim or the held session.
    fn open_attempt(&mut self) {
        self.next_conn += 1;
        let id = self.next_conn;
        let endpoint = match &mut self.mode {
            Mode::Claiming(c) => c.target.endpoint.clone(),
            Mode::Held(h) => h.endpoint.clone(),
            _ => return,
        };
        if let Some(tries) = self.attempts_mut() {
            tries.conn = Some(Conn {
                id,
                opened: false,
                acked: false,
            });
            tries.retry_at = None;
        }
        self.push(Output::Open { conn: id, endpoint });
    }

    /// The connection opened (the pin check, if any, passed): the first frame goes out.
    pub fn on_open(&mut self, conn: ConnId) {
        let frame = match &mut self.mode {
            Mode::Claiming(c) => c.tries.current_mut(conn).map(|slot| {
                slot.opened = true;
                AppFrame::SessionClaim(
                    SessionClaim::new(c.target.session_id.clone(), c.target.token.clone())
                        .with_device(self.device.clone()),
                )
            }),
            Mode::Held(h) => h.tries.current_mut(conn).filter(|c| !c.acked).map(|slot| {
                slot.opened = true;
                AppFrame::SessionResume(SessionResume::new(
                    h.session_id.clone(),
                    h.resume_token.clone(),
                ))
            }),
            _ => None,
        };
        match frame {
            Some(frame) => {
                // Claims and resumes are far below the limit: the session id and tokens are
                // identifiers and the device fields are cut to 256 units.
                if let Err(e) = self.send(conn, &frame) {
                    self.error(ErrorPhase::Connect, "frame_too_large", e.to_string());
                }
            }
            // A connection the core gave up on meanwhile.
            None => self.push(Output::Abort { conn }),
        }
    }

    /// The connection never opened.
    pub fn on_open_failed(&mut self, now: u64, conn: ConnId, failure: OpenFailure) {
        let Some(tries) = self.attempts_mut() else {
            return;
        };
        if tries.current(conn).is_none() {
            return;
        }
        tries.conn = None;
        match failure {
            OpenFailure::PinMismatch => {
                self.error(
                    ErrorPhase::Connect,
                    reasons::PIN_MISMATCH,
                    "the daemon's certificate does not match a trusted pin".to_owned(),
                );
                match &self.mode {
                    Mode::Claiming(_) => {
                        self.fail_claim(ConnectError::PinMismatch, reasons::PIN_MISMATCH)
                    }
                    _ => self.end_session(reasons::PIN_MISMATCH, abort_reasons::SESSION_SUSPENDED),
                }
            }
            // A held session: neither the daemon's plain close nor a message 2 that fails can be
            // told from an attacker on the path, so it is a lost connection (1006), retried
            // within grace; a rotated daemon key simply runs out the grace.
            OpenFailure::HandshakeFailed if matches!(self.mode, Mode::Held(_)) => {
                tracing::debug!(
                    conn,
                    "appduct sealed handshake failed on a resume; retrying"
                );
                self.schedule_retry(now);
            }
            // A first claim: the link names a key this daemon does not hold (a forged failure
            // only costs a new link).
            OpenFailure::HandshakeFailed => {
                self.error(
                    ErrorPhase::Connect,
                    reasons::HANDSHAKE_FAILED,
                    "the sealed handshake failed: the daemon does not hold the link's key"
                        .to_owned(),
                );
                self.fail_claim(ConnectError::HandshakeFailed, reasons::HANDSHAKE_FAILED);
            }
            OpenFailure::Other(detail) => {
                tracing::debug!(conn, %detail, "appduct connection failed to open");
                self.schedule_retry(now);
            }
        }
    }

    /// The connection closed (with the daemon's close code and reason) or died (`code` is
    /// `None`: no close frame, I/O error, end of stream).
    pub fn on_closed(&mut self, now: u64, conn: ConnId, code: Option<u16>, reason: Option<&str>) {
        let Some(tries) = self.attempts_mut() else {
            return;
        };
        let Some(slot) = tries.current(conn) else {
            return;
        };
        if slot.acked {
            self.lose_established(now, code, reason);
            return;
        }
        tries.conn = None;
        let terminal = close::is_terminal(code);
        match &self.mode {
            Mode::Claiming(_) if terminal => self.fail_claim(
                ConnectError::Failed {
                    close_reason: reason.filter(|r| !r.is_empty()).map(str::to_owned),
                },
                reasons::CONNECT_ERROR,
            ),
            Mode::Held(_) if terminal => {
                let reason = reason_or_rejected(reason);
                self.end_session(&reason, abort_reasons::SESSION_SUSPENDED);
            }
            _ => self.schedule_retry(now),
        }
    }

    /// A pong arrived.
    pub fn on_pong(&mut self, conn: ConnId) {
        if let Mode::Held(h) = &mut self.mode
            && h.tries.current(conn).is_some_and(|c| c.acked)
            && let Some(k) = &mut h.keepalive
        {
            k.awaiting_pong = false;
        }
    }

    /// One text message from the daemon. Unknown types and fields are ignored; a message that
    /// is not a valid daemon frame is ignored too (§T7.2).
    pub fn on_text(&mut self, now: u64, conn: ConnId, text: &str) {
        if !self
            .attempts()
            .and_then(|t| t.current(conn))
            .is_some_and(|c| c.opened)
        {
            return;
        }
        let frame = match decode_daemon_message(text) {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(conn, error = %e, "ignoring an unreadable daemon message");
                return;
            }
        };
        match frame {
            DaemonFrame::SessionAck(ack) => self.on_ack(now, conn, ack),
            DaemonFrame::ToolCall(call) => self.on_tool_call(now, call),
            DaemonFrame::ToolCancel(cancel) => self.on_tool_cancel(cancel),
        }
    }

    fn on_ack(&mut self, now: u64, conn: ConnId, ack: SessionAck) {
        let pending = self
            .attempts()
            .and_then(|t| t.current(conn))
            .is_some_and(|c| !c.acked);
        if !pending {
            // A second ack on an acked socket changes nothing.
            return;
        }
        let keepalive_ms = ack.keepalive_interval_s.saturating_mul(1000);
        let keepalive = (keepalive_ms > 0).then_some(Keepalive {
            next_at: now.saturating_add(keepalive_ms),
            awaiting_pong: false,
        });
        let acked_conn = Conn {
            id: conn,
            opened: true,
            acked: true,
        };
        let tries = Attempts {
            conn: Some(acked_conn),
            attempt: 0,
            retry_at: None,
        };
        match std::mem::replace(&mut self.mode, Mode::Idle) {
            Mode::Claiming(claim) => {
                let held = Held {
                    session_id: ack.session_id,
                    alias: ack.alias,
                    resume_token: ack.resume_token,
                    grace_ms: ack.grace_s.saturating_mul(1000),
                    keepalive_ms,
                    event_registry: ack.event_registry,
                    result_content: ack.result_content,
                    result_parts_max_bytes: ack.result_parts_max_bytes,
                    endpoint: claim.target.endpoint,
                    tries,
                    lost_at: None,
                    keepalive,
                };
                let info = held.info();
                self.mode = Mode::Held(held);
                self.sync_state();
                self.push(Output::Session(SessionEvent::Claimed(info.clone())));
                self.push(Output::ConnectFinished {
                    connect: claim.connect,
                    result: Ok(info),
                });
            }
            Mode::Held(mut held) => {
                held.alias = ack.alias;
                held.resume_token = ack.resume_token;
                held.grace_ms = ack.grace_s.saturating_mul(1000);
                held.keepalive_ms = keepalive_ms;
                held.event_registry = ack.event_registry;
                held.result_content = ack.result_content;
                held.result_parts_max_bytes = ack.result_parts_max_bytes;
                held.tries = tries;
                held.lost_at = None;
                held.keepalive = keepalive;
                let info = held.info();
                self.mode = Mode::Held(held);
                self.sync_state();
                self.push(Output::Session(SessionEvent::Resumed(info)));
            }
            other => {
                self.mode = other;
                return;
            }
        }
        // Both snapshots go out while the ack is handled, so a later registration is always a
        // delta (§D13.3).
        self.send_snapshots(conn);
    }

    fn send_snapshots(&mut self, conn: ConnId) {
        let Some(h) = self.active() else {
            return;
        };
        let session_id = h.session_id.clone();
        let event_registry = h.event_registry;
        let tools = AppFrame::ToolRegistrySnapshot(ToolRegistrySnapshot::new(
            session_id.clone(),
            self.tools(),
        ));
        if let Err(e) = self.send(conn, &tools) {
            self.error(
                ErrorPhase::Socket,
                "registry_not_sent",
                format!("The tool registry snapshot is {e}."),
            );
        }
        if event_registry {
            let events = AppFrame::EventRegistrySnapshot(EventRegistrySnapshot::new(
                session_id,
                self.events(),
            ));
            if let Err(e) = self.send(conn, &events) {
                self.error(
                    ErrorPhase::Socket,
                    "registry_not_sent",
                    format!("The event registry snapshot is {e}."),
                );
            }
        }
    }

    /// Loss of the acked socket (§D13.1): 1000 ends the session (`revoked`), 1008 ends it with
    /// the close reason, anything else suspends it and schedules a resume.
    fn lose_established(&mut self, now: u64, code: Option<u16>, reason: Option<&str>) {
        if code == Some(close::NORMAL) {
            self.end_session(reasons::REVOKED, abort_reasons::SESSION_SUSPENDED);
            return;
        }
        if close::is_terminal(code) {
            let reason = reason_or_rejected(reason);
            self.end_session(&reason, abort_reasons::SESSION_SUSPENDED);
            return;
        }
        if let Mode::Held(h) = &mut self.mode {
            h.tries.conn = None;
            h.lost_at = Some(now);
            h.keepalive = None;
        }
        self.sync_state();
        self.abort_calls(abort_reasons::SESSION_SUSPENDED);
        self.schedule_retry(now);
    }

    /// Arms the next retry after a failed attempt. A held session makes no attempt while in
    /// the background (§D13.4); a claim retries regardless.
    fn schedule_retry(&mut self, now: u64) {
        let waits = match &self.mode {
            Mode::Claiming(_) => true,
            Mode::Held(_) => self.foreground,
            _ => false,
        };
        let Some(attempt) = self.attempts().map(|t| t.attempt) else {
            return;
        };
        if !waits {
            if let Some(tries) = self.attempts_mut() {
                tries.retry_at = None;
            }
            return;
        }
        let delay = backoff_delay_ms(attempt, (self.random)());
        if let Some(tries) = self.attempts_mut() {
            tries.retry_at = Some(now.saturating_add(delay));
            tries.attempt = tries.attempt.saturating_add(1);
        }
    }

    /// The claim ended without an ack: state `closed` with `closed_reason`, and the connect
    /// fails with `error`.
    fn fail_claim(&mut self, error: ConnectError, closed_reason: &str) {
        let Mode::Claiming(claim) = std::mem::replace(
            &mut self.mode,
            Mode::Closed {
                reason: closed_reason.to_owned(),
            },
        ) else {
            return;
        };
        self.sync_state();
        self.push(Output::ConnectFinished {
            connect: claim.connect,
            result: Err(error),
        });
        self.release(claim.tries.conn, close::NORMAL, closed_reason);
    }

    /// The held session ends: state `closed`, then `lost`, then every call aborts (§D13.1).
    fn end_session(&mut self, reason: &str, abort_reason: &str) {
        let Mode::Held(held) = std::mem::replace(
            &mut self.mode,
            Mode::Closed {
                reason: reason.to_owned(),
            },
        ) else {
            return;
        };
        self.sync_state();
        self.push(Output::Session(SessionEvent::Lost {
            reason: reason.to_owned(),
        }));
        self.abort_calls(abort_reason);
        self.release(held.tries.conn, close::NORMAL, reason);
    }

    /// `disconnect()`: state `closed` (`closed_by_app`), the socket closes with 1000, a held
    /// session is reported `lost`, calls abort with `closed`.
    pub fn disconnect(&mut self) {
        match &self.mode {
            Mode::Claiming(_) => self.fail_claim(ConnectError::ClosedByApp, reasons::CLOSED_BY_APP),
            Mode::Held(_) => self.end_session(reasons::CLOSED_BY_APP, abort_reasons::CLOSED),
            Mode::Idle => {
                self.mode = Mode::Closed {
                    reason: reasons::CLOSED_BY_APP.to_owned(),
                };
                self.sync_state();
            }
            Mode::Closed { .. } => {}
        }
    }

    /// The app left (`false`) or returned to (`true`) the foreground (§D13.4).
    pub fn set_foreground(&mut self, now: u64, foreground: bool) {
        if foreground == self.foreground {
            return;
        }
        self.foreground = foreground;
        let Mode::Held(h) = &mut self.mode else {
            // A claim keeps its schedule; an ack in the background still activates.
            return;
        };
        if !foreground {
            let conn = h.tries.conn.take();
            h.tries.retry_at = None;
            if conn.is_some_and(|c| c.acked) {
                h.lost_at = Some(now);
                h.keepalive = None;
            }
            if let Some(c) = conn {
                if c.opened {
                    self.push(Output::Close {
                        conn: c.id,
                        code: close::GOING_AWAY,
                        reason: close::CloseReason::AppBackgrounded.reason().to_owned(),
                    });
                } else {
                    self.push(Output::Abort { conn: c.id });
                }
            }
            self.sync_state();
            self.abort_calls(abort_reasons::SESSION_SUSPENDED);
            return;
        }
        if h.is_active() || h.tries.conn.is_some() {
            return;
        }
        let within_grace = h.grace_deadline().is_none_or(|deadline| now < deadline);
        if within_grace {
            self.open_attempt();
        } else {
            self.end_session(reasons::GRACE_EXPIRED, abort_reasons::SESSION_SUSPENDED);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Timers
    // -----------------------------------------------------------------------------------------

    fn next_timer(&self) -> Option<(u64, Timer)> {
        let mut timers: Vec<(u64, Timer)> = Vec::with_capacity(4);
        if let Some(((deadline, _), _)) = self.deadlines.first_key_value() {
            timers.push((*deadline, Timer::Call));
        }
        if let Some(tries) = self.attempts()
            && let Some(at) = tries.retry_at
        {
            timers.push((at, Timer::Retry));
        }
        if let Mode::Held(h) = &self.mode {
            if let Some(k) = h.keepalive.filter(|_| h.is_active()) {
                timers.push((k.next_at, Timer::Keepalive));
            }
            if let Some(deadline) = h.grace_deadline().filter(|_| !h.is_active()) {
                timers.push((deadline, Timer::Grace));
            }
        }
        timers.into_iter().min()
    }

    /// Runs every timer due at `now`, earliest first.
    pub fn on_timeout(&mut self, now: u64) {
        while let Some((at, timer)) = self.next_timer() {
            if at > now {
                break;
            }
            match timer {
                Timer::Call => self.fire_call_deadline(),
                Timer::Keepalive => self.fire_keepalive(now),
                Timer::Grace => {
                    self.end_session(reasons::GRACE_EXPIRED, abort_reasons::SESSION_SUSPENDED)
                }
                Timer::Retry => self.fire_retry(now),
            }
        }
    }

    fn fire_call_deadline(&mut self) {
        let Some((_, id)) = self.deadlines.pop_first() else {
            return;
        };
        let Some(call) = self.calls.remove(&id) else {
            return;
        };
        let message = format!(
            "Tool \"{}\" did not respond within {}ms.",
            call.name, call.timeout_ms
        );
        self.reply_error(&id, error_body(ToolErrorType::ToolTimeout, &message, None));
        self.push(Output::CallCancelled {
            id,
            reason: abort_reasons::TIMEOUT.to_owned(),
        });
    }

    /// A ping unanswered by the next tick is a lost connection (§D13.6).
    fn fire_keepalive(&mut self, now: u64) {
        let Mode::Held(h) = &mut self.mode else {
            return;
        };
        let (Some(conn), Some(k)) = (h.tries.conn, h.keepalive.as_mut()) else {
            return;
        };
        if k.awaiting_pong {
            self.push(Output::Abort { conn: conn.id });
            self.lose_established(now, None, None);
            return;
        }
        k.awaiting_pong = true;
        k.next_at = now.saturating_add(h.keepalive_ms);
        self.push(Output::Ping { conn: conn.id });
    }

    fn fire_retry(&mut self, now: u64) {
        match &mut self.mode {
            Mode::Claiming(c) => {
                c.tries.retry_at = None;
                if now / 1000 >= c.target.expires_at {
                    self.fail_claim(
                        ConnectError::Failed { close_reason: None },
                        reasons::CONNECT_ERROR,
                    );
                } else {
                    self.open_attempt();
                }
            }
            Mode::Held(h) => {
                h.tries.retry_at = None;
                self.open_attempt();
            }
            _ => {}
        }
    }

    // -----------------------------------------------------------------------------------------
    // Calls
    // -----------------------------------------------------------------------------------------

    fn reply_error(&mut self, id: &str, body: ToolErrorBody) {
        let Some(session_id) = self.active().map(|h| h.session_id.clone()) else {
            return;
        };
        let frame = tool_error_frame(&session_id, id, body);
        // Bounded fields only: always far below the limit.
        let _ = self.send_active(&frame);
    }

    fn on_tool_call(&mut self, now: u64, call: ToolCall) {
        let Some(session_id) = self.active().map(|h| h.session_id.clone()) else {
            return;
        };
        // A second frame with an id in flight is ignored (§T5.3).
        if self.calls.contains_key(&call.id) {
            return;
        }
        let Some((registration, tool)) = self.tools.get(&call.name) else {
            let message = format!("Tool \"{}\" is not registered.", call.name);
            self.reply_error(
                &call.id,
                error_body(ToolErrorType::ToolNotFound, &message, None),
            );
            return;
        };
        let has_input_schema = tool.input_schema.is_some();
        let has_output_schema = tool.output_schema.is_some();
        let timeout_ms = tool.effective_timeout_ms();
        if !has_input_schema && !call.args.is_empty() {
            let issues: Vec<Value> = call
                .args
                .keys()
                .map(|k| json!({"message": "unexpected argument", "path": [k]}))
                .collect();
            let message = format!("Tool \"{}\" takes no arguments.", call.name);
            self.reply_error(
                &call.id,
                error_body(
                    ToolErrorType::ToolInputValidationError,
                    &message,
                    Some(json!({ "issues": issues })),
                ),
            );
            return;
        }
        self.next_call_seq += 1;
        let seq = self.next_call_seq;
        let deadline = now.saturating_add(timeout_ms);
        self.deadlines.insert((deadline, seq), call.id.clone());
        self.calls.insert(
            call.id.clone(),
            InFlight {
                name: call.name.clone(),
                seq,
                deadline,
                timeout_ms,
                has_output_schema,
            },
        );
        self.push(Output::CallStarted(CallStart {
            id: call.id,
            name: call.name,
            registration,
            args: call.args,
            has_input_schema,
            session_id,
            received_at_ms: now,
            timeout_ms,
        }));
    }

    fn on_tool_cancel(&mut self, cancel: ToolCancel) {
        let Some(call) = self.calls.remove(&cancel.id) else {
            // Unknown or finished: a no-op.
            return;
        };
        self.deadlines.remove(&(call.deadline, call.seq));
        let message = format!("Tool \"{}\" was cancelled.", call.name);
        self.reply_error(
            &cancel.id,
            error_body(ToolErrorType::ToolCancelled, &message, None),
        );
        self.push(Output::CallCancelled {
            id: cancel.id,
            reason: cancel.reason,
        });
    }

    /// Aborts every call in flight, in arrival order; nothing is sent for them.
    fn abort_calls(&mut self, reason: &str) {
        let mut calls: Vec<(u64, String)> = self
            .calls
            .drain()
            .map(|(id, call)| (call.seq, id))
            .collect();
        self.deadlines.clear();
        calls.sort_unstable();
        for (_, id) in calls {
            self.push(Output::CallCancelled {
                id,
                reason: reason.to_owned(),
            });
        }
    }

    /// A handler finished. Sends its reply if the call is still in flight (not timed out,
    /// cancelled or cut off by a socket loss); otherwise nothing is sent (§D13.5).
    ///
    /// A [`ToolOutput`] with content (issue #17, §D17) is sent as `tool_result` with `content`
    /// when the latest ack announced `result_content`; when that frame would pass 262,144
    /// bytes, as `tool_result_part` frames if the ack announced parts and the body fits their
    /// cap (§D17.2). Without `result_content` the content is dropped with a warning.
    pub fn call_finished<T: Into<ToolOutput>>(&mut self, id: &str, outcome: Result<T, ToolError>) {
        let Some(call) = self.calls.remove(id) else {
            return;
        };
        self.deadlines.remove(&(call.deadline, call.seq));
        let Some((session_id, result_content, parts_max)) = self.active().map(|h| {
            (
                h.session_id.clone(),
                h.result_content,
                h.result_parts_max_bytes,
            )
        }) else {
            return;
        };
        let outcome = outcome.map(Into::into);
        let mut dropped_content = false;
        let frame = match outcome {
            Ok(ToolOutput { result, content }) => {
                let content = if content.is_empty() {
                    None
                } else if result_content {
                    Some(content)
                } else {
                    dropped_content = true;
                    None
                };
                match (result, content) {
                    (Some(value), _) if !call.has_output_schema && !value.is_null() => Err(value),
                    (result, Some(content)) => {
                        let mut frame =
                            ToolResult::content_only(session_id.clone(), id.to_owned(), content);
                        frame.result = result;
                        Ok(AppFrame::ToolResult(frame))
                    }
                    (result, None) => Ok(AppFrame::ToolResult(ToolResult::new(
                        session_id.clone(),
                        id.to_owned(),
                        result.unwrap_or(Value::Null),
                    ))),
                }
            }
            Err(e) => Ok(tool_error_frame(
                &session_id,
                id,
                error_body(e.error_type, &e.message, e.details),
            )),
        };
        if dropped_content {
            self.push(Output::Error(ErrorReport {
                phase: ErrorPhase::Tool,
                code: None,
                message: format!(
                    "Tool \"{}\" returned content, but the daemon does not accept content \
                     results; only its JSON result was sent.",
                    call.name
                ),
                tool_name: Some(call.name.clone()),
                call_id: Some(id.to_owned()),
            }));
        }
        let frame = match frame {
            Err(_) => {
                let message = format!(
                    "Tool \"{}\" returned a value but declares no output schema.",
                    call.name
                );
                tool_error_frame(
                    &session_id,
                    id,
                    error_body(ToolErrorType::ToolOutputValidationError, &message, None),
                )
            }
            Ok(frame) => frame,
        };
        let sent = match (&frame, self.send_active(&frame)) {
            // §D17.2: too large for one frame, but the daemon takes parts.
            (AppFrame::ToolResult(r), Err(too_large)) => match parts_max {
                Some(max) => {
                    let body = encode_body(r.result.as_ref(), r.content.as_deref());
                    if body.len() as u64 <= max {
                        for part in split_body(&session_id, id, body.as_bytes()) {
                            // Parts are at most 131,072 bytes of data: they always fit.
                            let _ = self.send_active(&AppFrame::ToolResultPart(part));
                        }
                        Ok(())
                    } else {
                        Err(too_large)
                    }
                }
                None => Err(too_large),
            },
            (_, sent) => sent,
        };
        if let Err(too_large) = sent {
            let message = format!(
                "Tool \"{}\" returned {} bytes; the frame limit is {MAX_MESSAGE_BYTES}.",
                call.name, too_large.bytes
            );
            self.reply_error(
                id,
                error_body(
                    ToolErrorType::ToolSerializationError,
                    &message,
                    Some(json!({"bytes": too_large.bytes, "limitBytes": MAX_MESSAGE_BYTES})),
                ),
            );
            self.push(Output::Error(ErrorReport {
                phase: ErrorPhase::Tool,
                code: Some(ToolErrorType::ToolSerializationError.as_str().to_owned()),
                message,
                tool_name: Some(call.name),
                call_id: Some(id.to_owned()),
            }));
        }
    }

    /// Best-effort progress of a call in flight (§D13.5). Returns whether a frame went out.
    /// A non-finite `progress` is omitted; `message` is cut to 4096 UTF-16 code units.
    pub fn progress(&mut self, id: &str, progress: Option<f64>, message: Option<&str>) -> bool {
        if !self.calls.contains_key(id) {
            return false;
        }
        let Some(session_id) = self.active().map(|h| h.session_id.clone()) else {
            return false;
        };
        let frame = AppFrame::ToolCallProgress(
            ToolCallProgress::new(session_id, id.to_owned())
                .with_progress(progress.and_then(Number::from_f64))
                .with_message(message.map(|m| truncate_utf16(m, MAX_FREE_TEXT_LEN).to_owned())),
        );
        self.send_active(&frame).is_ok()
    }

    // -----------------------------------------------------------------------------------------
    // Registries
    // -----------------------------------------------------------------------------------------

    fn next_registration_id(&mut self) -> RegistrationId {
        self.next_registration += 1;
        self.next_registration
    }

    /// Registers (or replaces) a validated tool. While active, an upsert delta goes out now;
    /// otherwise the next snapshot carries it.
    pub fn register_tool(
        &mut self,
        tool: ToolDescriptor,
    ) -> Result<RegistrationId, RegistrationError> {
        let id = self.next_registration_id();
        self.tools.upsert(id, &tool.name, tool.clone())?;
        if let Some(session_id) = self.active().map(|h| h.session_id.clone()) {
            let frame = AppFrame::ToolRegistryDelta(ToolRegistryDelta::new(
                session_id,
                ToolDelta::Upsert(tool),
            ));
            if let Err(e) = self.send_active(&frame) {
                self.error(
                    ErrorPhase::Socket,
                    "registry_not_sent",
                    format!("The tool registry delta is {e}."),
                );
            }
        }
        Ok(id)
    }

    /// Removes the tool registered under `id`, if that registration is still current.
    pub fn remove_tool(&mut self, id: RegistrationId) -> bool {
        let Some(name) = self.tools.remove(id) else {
            return false;
        };
        if let Some(session_id) = self.active().map(|h| h.session_id.clone()) {
            let frame = AppFrame::ToolRegistryDelta(ToolRegistryDelta::new(
                session_id,
                ToolDelta::Remove { name },
            ));
            let _ = self.send_active(&frame);
        }
        true
    }

    fn event_session(&self) -> Option<String> {
        self.active()
            .filter(|h| h.event_registry)
            .map(|h| h.session_id.clone())
    }

    /// Declares (or replaces) a validated event. Deltas go only to a daemon whose last ack
    /// carried `event_registry: true` (§D13.3).
    pub fn declare_event(
        &mut self,
        event: EventDescriptor,
    ) -> Result<RegistrationId, RegistrationError> {
        let id = self.next_registration_id();
        self.events.upsert(id, &event.name, event.clone())?;
        if let Some(session_id) = self.event_session() {
            let frame = AppFrame::EventRegistryDelta(EventRegistryDelta::new(
                session_id,
                EventDelta::Upsert(event),
            ));
            if let Err(e) = self.send_active(&frame) {
                self.error(
                    ErrorPhase::Socket,
                    "registry_not_sent",
                    format!("The event registry delta is {e}."),
                );
            }
        }
        Ok(id)
    }

    /// Withdraws the event declared under `id`, if that declaration is still current.
    pub fn remove_event(&mut self, id: RegistrationId) -> bool {
        let Some(name) = self.events.remove(id) else {
            return false;
        };
        if let Some(session_id) = self.event_session() {
            let frame = AppFrame::EventRegistryDelta(EventRegistryDelta::new(
                session_id,
                EventDelta::Remove { name },
            ));
            let _ = self.send_active(&frame);
        }
        true
    }

    /// Sends `event {name, payload?, ts: now}` (§T6). Dropped when not active; an invalid
    /// name or an encoded frame over 262144 bytes is refused, reported to the error listener,
    /// and leaves the connection open (§D13.6).
    pub fn post_event(
        &mut self,
        now: u64,
        name: &str,
        payload: Option<Value>,
    ) -> Result<(), EventError> {
        if !utf16_len_within(name, 1, MAX_FREE_TEXT_LEN) {
            let shown = truncate_utf16(name, 64).to_owned();
            self.push(Output::Error(ErrorReport {
                phase: ErrorPhase::Socket,
                code: Some("event_not_sent".to_owned()),
                message: format!(
                    "Event name {shown:?} must be 1 to {MAX_FREE_TEXT_LEN} UTF-16 code units long."
                ),
                tool_name: None,
                call_id: None,
            }));
            return Err(EventError::InvalidName);
        }
        let Some(session_id) = self.active().map(|h| h.session_id.clone()) else {
            return Err(EventError::NotActive);
        };
        let frame = AppFrame::Event(
            EventFrame::new(session_id, name.to_owned(), Number::from(now)).with_payload(payload),
        );
        self.send_active(&frame).map_err(|size| {
            let message = format!(
                "Event \"{name}\" is {} bytes; the frame limit is {MAX_MESSAGE_BYTES}.",
                size.bytes
            );
            self.push(Output::Error(ErrorReport {
                phase: ErrorPhase::Socket,
                code: Some("event_not_sent".to_owned()),
                message: message.clone(),
                tool_name: None,
                call_id: None,
            }));
            EventError::TooLarge { message, size }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ContentBlock, ImageMimeType};
    use appduct_protocol::descriptor::validate_tool_descriptor;
    use appduct_protocol::parts::ResultAssembler;
    use std::net::Ipv4Addr;

    const T0: u64 = 1_700_000_000_000;

    fn endpoint() -> Endpoint {
        Endpoint {
            transport: Transport::Native,
            sealed_key: None,
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 8443,
            pins: Vec::new(),
        }
    }

    fn core(r: f64) -> Core {
        Core::new(DeviceInfo::default(), Box::new(move || r))
    }

    fn drain(core: &mut Core) -> Vec<Output> {
        std::iter::from_fn(|| core.poll_output()).collect()
    }

    fn sent(outputs: &[Output]) -> Vec<Value> {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Send { text, .. } => serde_json::from_str(text).ok(),
                _ => None,
            })
            .collect()
    }

    fn opened(outputs: &[Output]) -> Option<ConnId> {
        outputs.iter().find_map(|o| match o {
            Output::Open { conn, .. } => Some(*conn),
            _ => None,
        })
    }

    fn ack(token: &str, event_registry: bool) -> String {
        json!({"type": "session_ack", "session_id": "s1", "status": "ok", "alias": "phone",
               "resume_token": token, "keepalive_interval_s": 15, "grace_s": 10,
               "event_registry": event_registry})
        .to_string()
    }

    /// A core with an acked claim on connection 1.
    fn active_core(event_registry: bool) -> Core {
        acked_core(&ack("r1", event_registry))
    }

    /// A core whose claim on connection 1 was answered with `ack_text`.
    fn acked_core(ack_text: &str) -> Core {
        let mut c = core(0.5);
        c.connect_bootstrap(Bootstrap {
            session_id: "s1".into(),
            token: "tok".into(),
            expires_at: T0 / 1000 + 300,
            endpoint: endpoint(),
        });
        let conn = opened(&drain(&mut c)).unwrap();
        c.on_open(conn);
        c.on_text(T0, conn, ack_text);
        drain(&mut c);
        c
    }

    #[test]
    fn backoff_is_full_jitter_with_a_cap() {
        assert_eq!(backoff_delay_ms(0, 0.5), 250);
        assert_eq!(backoff_delay_ms(1, 0.5), 500);
        assert_eq!(backoff_delay_ms(2, 0.5), 1000);
        assert_eq!(backoff_delay_ms(10, 0.5), 15_000);
        assert_eq!(backoff_delay_ms(63, 0.5), 15_000);
        assert_eq!(backoff_delay_ms(200, 0.999_999), 29_999);
        assert_eq!(backoff_delay_ms(0, 0.0), 0);
        assert_eq!(backoff_delay_ms(0, f64::NAN), 0);
        assert_eq!(backoff_delay_ms(0, 7.0), 499, "r is clamped below 1");
    }

    #[test]
    fn endpoint_urls_bracket_ipv6() {
        let mut e = endpoint();
        assert_eq!(e.url(), "wss://127.0.0.1:8443/");
        e.address = "fd00::1".parse().unwrap();
        e.transport = Transport::Web;
        assert_eq!(e.url(), "ws://[fd00::1]:8443/");
    }

    #[test]
    fn the_claim_carries_device_fields_cut_to_bounds() {
        let device = DeviceInfo::default()
            .with_manufacturer(Some("m".repeat(300)))
            .with_model(Some(String::new()))
            .with_os(Some("os".into()));
        let mut c = Core::new(device, Box::new(|| 0.5));
        c.connect_bootstrap(Bootstrap {
            session_id: "s1".into(),
            token: "tok".into(),
            expires_at: u64::MAX,
            endpoint: endpoint(),
        });
        let conn = opened(&drain(&mut c)).unwrap();
        c.on_open(conn);
        let frames = sent(&drain(&mut c));
        assert_eq!(frames[0]["type"], "session_claim");
        assert_eq!(frames[0]["protocol_version"], 2);
        assert_eq!(frames[0]["token"], "tok");
        assert_eq!(
            frames[0]["device_manufacturer"].as_str().unwrap().len(),
            256
        );
        assert!(frames[0].get("device_model").is_none(), "empty is omitted");
        assert_eq!(frames[0]["device_os"], "os");
    }

    #[test]
    fn deltas_follow_the_snapshot_in_call_order() {
        let mut c = active_core(true);
        let tool = validate_tool_descriptor(&json!({"name": "t", "description": "d"})).unwrap();
        let id = c.register_tool(tool.clone()).unwrap();
        assert!(c.remove_tool(id));
        assert!(!c.remove_tool(id), "a second remove is a no-op");
        c.register_tool(tool).unwrap();
        let ops: Vec<Value> = sent(&drain(&mut c))
            .into_iter()
            .map(|f| f["operation"].clone())
            .collect();
        assert_eq!(ops, [json!("upsert"), json!("remove"), json!("upsert")]);
    }

    #[test]
    fn no_event_frames_reach_a_daemon_without_the_flag() {
        let mut c = active_core(false);
        let event = appduct_protocol::descriptor::validate_event_descriptor(
            &json!({"name": "e", "description": "d"}),
        )
        .unwrap();
        let id = c.declare_event(event).unwrap();
        c.remove_event(id);
        assert!(sent(&drain(&mut c)).is_empty());
    }

    #[test]
    fn unknown_tools_and_unexpected_args_are_refused() {
        let mut c = active_core(false);
        let tool = validate_tool_descriptor(&json!({"name": "t", "description": "d"})).unwrap();
        c.register_tool(tool).unwrap();
        drain(&mut c);
        let call = |id: &str, name: &str, args: Value| {
            json!({"type": "tool_call", "session_id": "s1", "id": id, "name": name, "args": args})
                .to_string()
        };
        c.on_text(T0, 1, &call("c1", "nope", json!({})));
        c.on_text(T0, 1, &call("c2", "t", json!({"x": 1})));
        let frames = sent(&drain(&mut c));
        assert_eq!(frames[0]["error"]["type"], "tool_not_found");
        assert_eq!(
            frames[0]["error"]["message"],
            "Tool \"nope\" is not registered."
        );
        assert_eq!(frames[1]["error"]["type"], "tool_input_validation_error");
        assert_eq!(
            frames[1]["error"]["message"],
            "Tool \"t\" takes no arguments."
        );
        assert_eq!(
            frames[1]["error"]["details"]["issues"][0]["path"],
            json!(["x"])
        );
    }

    #[test]
    fn replies_follow_the_output_rules() {
        let mut c = active_core(false);
        for d in [
            json!({"name": "plain", "description": "d"}),
            json!({"name": "typed", "description": "d", "output_schema": {"type": "object"}}),
        ] {
            c.register_tool(validate_tool_descriptor(&d).unwrap())
                .unwrap();
        }
        drain(&mut c);
        for (id, name) in [
            ("a", "plain"),
            ("b", "plain"),
            ("c", "typed"),
            ("d", "typed"),
        ] {
            let frame = json!({"type": "tool_call", "session_id": "s1", "id": id,
                               "name": name, "args": {}});
            c.on_text(T0, 1, &frame.to_string());
        }
        let starts = drain(&mut c);
        assert!(
            starts
                .iter()
                .all(|o| matches!(o, Output::CallStarted(s) if !s.has_input_schema))
        );
        c.call_finished("a", Ok(Value::Null));
        c.call_finished("b", Ok(json!(1)));
        c.call_finished("c", Ok(json!({"ok": true})));
        c.call_finished::<Value>("d", Err(ToolError::execution("x".repeat(5000))));
        c.call_finished("d", Ok(json!(1)));
        let frames = sent(&drain(&mut c));
        assert_eq!(frames.len(), 4, "a second answer sends nothing");
        assert_eq!(frames[0]["result"], Value::Null);
        assert_eq!(frames[1]["error"]["type"], "tool_output_validation_error");
        assert_eq!(frames[2]["result"], json!({"ok": true}));
        assert_eq!(
            frames[3]["error"]["message"].as_str().unwrap().len(),
            4096,
            "messages are cut to 4096 units"
        );
    }

    #[test]
    fn an_oversized_reply_becomes_a_serialization_error() {
        let mut c = active_core(false);
        let d = json!({"name": "big", "description": "d", "output_schema": {"type": "string"}});
        c.register_tool(validate_tool_descriptor(&d).unwrap())
            .unwrap();
        let frame = json!({"type": "tool_call", "session_id": "s1", "id": "c1",
                           "name": "big", "args": {}});
        c.on_text(T0, 1, &frame.to_string());
        drain(&mut c);
        c.call_finished("c1", Ok(Value::String("x".repeat(MAX_MESSAGE_BYTES))));
        let out = drain(&mut c);
        let frames = sent(&out);
        assert_eq!(frames.len(), 1);
        let error = &frames[0]["error"];
        assert_eq!(error["type"], "tool_serialization_error");
        let bytes = error["details"]["bytes"].as_u64().unwrap();
        assert!(bytes > MAX_MESSAGE_BYTES as u64);
        assert_eq!(
            error["message"],
            format!("Tool \"big\" returned {bytes} bytes; the frame limit is 262144.")
        );
        assert_eq!(error["details"]["limitBytes"], 262_144);
        assert!(out.iter().any(|o| matches!(o, Output::Error(_))));
        assert_eq!(c.state(), &ClientState::Active, "the connection stays open");
    }

    /// A core acked with the issue #17 fields (`parts`: `result_parts_max_bytes`), with tool
    /// `pic` (an output schema) called as `c1`.
    fn content_core(result_content: bool, parts: Option<u64>) -> Core {
        let mut ack: Value = serde_json::from_str(&ack("r1", false)).unwrap();
        if result_content {
            ack["result_content"] = json!(true);
        }
        if let Some(max) = parts {
            ack["result_parts_max_bytes"] = json!(max);
        }
        let mut c = acked_core(&ack.to_string());
        let d = json!({"name": "pic", "description": "d", "output_schema": {"type": "object"}});
        c.register_tool(validate_tool_descriptor(&d).unwrap())
            .unwrap();
        let frame = json!({"type": "tool_call", "session_id": "s1", "id": "c1",
                           "name": "pic", "args": {}});
        c.on_text(T0, 1, &frame.to_string());
        drain(&mut c);
        c
    }

    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3];

    #[test]
    fn content_goes_out_when_the_ack_announced_it() {
        let mut c = content_core(true, Some(16_777_216));
        let image = ContentBlock::image(PNG, ImageMimeType::Png);
        c.call_finished("c1", Ok(ToolOutput::content(vec![image.clone()])));
        let frames = sent(&drain(&mut c));
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0]["type"], "tool_result");
        assert!(frames[0].get("result").is_none(), "{}", frames[0]);
        assert_eq!(frames[0]["content"], json!([image.to_value()]));
    }

    #[test]
    fn content_is_dropped_with_a_warning_for_a_daemon_without_it() {
        let mut c = content_core(false, None);
        let out = ToolOutput::content(vec![ContentBlock::text("hi")]).with_result(json!({"n": 1}));
        c.call_finished("c1", Ok(out));
        let out = drain(&mut c);
        let frames = sent(&out);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0]["result"], json!({"n": 1}));
        assert!(frames[0].get("content").is_none(), "{}", frames[0]);
        assert!(out.iter().any(|o| matches!(o, Output::Error(_))));
    }

    #[test]
    fn a_result_past_the_frame_limit_goes_in_parts_when_announced() {
        let mut c = content_core(true, Some(16_777_216));
        let big = json!({"blob": "x".repeat(600_000)});
        let image = ContentBlock::image(PNG, ImageMimeType::Png);
        c.call_finished(
            "c1",
            Ok(ToolOutput::content(vec![image.clone()]).with_result(big.clone())),
        );
        let frames = sent(&drain(&mut c));
        assert!(frames.len() > 4);
        let mut body = Vec::new();
        let mut asm = None;
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(f["type"], "tool_result_part");
            assert!(
                f.to_string().len() < MAX_MESSAGE_BYTES,
                "part {i} fits a frame"
            );
            let data = f["data"].as_str().unwrap();
            let frame = appduct_protocol::frames::decode_app_message(
                &f.to_string(),
                appduct_protocol::frames::Phase::Acked { session_id: "s1" },
            )
            .unwrap();
            let AppFrame::ToolResultPart(part) = frame else {
                panic!("not a part");
            };
            assert_eq!(part.data, data);
            if i == 0 {
                asm = Some(ResultAssembler::start(&part, 16_777_216).unwrap());
            }
            let done = asm.as_mut().unwrap().push(&part).unwrap();
            assert_eq!(done, i == frames.len() - 1);
            body.push(part);
        }
        assert_eq!(body.len(), frames.len());
        let parsed = asm.unwrap().finish().unwrap();
        assert_eq!(parsed.result, Some(big));
        assert_eq!(parsed.content, Some(vec![image]));
    }

    #[test]
    fn a_result_past_the_frame_limit_without_parts_or_over_their_cap_fails_locally() {
        for parts in [None, Some(262_144)] {
            let mut c = content_core(true, parts);
            c.call_finished("c1", Ok(json!({"blob": "x".repeat(300_000)})));
            let frames = sent(&drain(&mut c));
            assert_eq!(frames.len(), 1);
            assert_eq!(frames[0]["error"]["type"], "tool_serialization_error");
        }
    }

    #[test]
    fn progress_goes_out_only_for_calls_in_flight() {
        let mut c = active_core(false);
        let d = json!({"name": "t", "description": "d"});
        c.register_tool(validate_tool_descriptor(&d).unwrap())
            .unwrap();
        let frame = json!({"type": "tool_call", "session_id": "s1", "id": "c1",
                           "name": "t", "args": {}});
        c.on_text(T0, 1, &frame.to_string());
        drain(&mut c);
        assert!(c.progress("c1", Some(0.5), Some("half")));
        assert!(c.progress("c1", Some(f64::NAN), None));
        assert!(!c.progress("other", Some(0.5), None));
        let frames = sent(&drain(&mut c));
        assert_eq!(frames[0]["progress"], 0.5);
        assert_eq!(frames[0]["message"], "half");
        assert!(frames[1].get("progress").is_none(), "non-finite is omitted");
    }

    #[test]
    fn a_missed_pong_is_a_connection_loss() {
        let mut c = active_core(false);
        c.on_timeout(T0 + 15_000);
        let out = drain(&mut c);
        assert!(matches!(out[..], [Output::Ping { conn: 1 }]));
        c.on_pong(1);
        c.on_timeout(T0 + 30_000);
        assert!(matches!(drain(&mut c)[..], [Output::Ping { conn: 1 }]));
        c.on_timeout(T0 + 45_000);
        let out = drain(&mut c);
        assert!(matches!(out[0], Output::Abort { conn: 1 }));
        assert_eq!(c.state(), &ClientState::Reconnecting);
        assert_eq!(c.poll_timeout(), Some(T0 + 45_000 + 250));
    }

    #[test]
    fn pin_mismatch_ends_a_held_session_without_retry() {
        let mut c = active_core(false);
        c.on_closed(T0, 1, Some(1006), None);
        c.on_timeout(T0 + 250);
        let conn = opened(&drain(&mut c)).unwrap();
        c.on_open_failed(T0 + 260, conn, OpenFailure::PinMismatch);
        let out = drain(&mut c);
        assert!(out.contains(&Output::State(ClientState::Closed {
            reason: "pin_mismatch".into()
        })));
        assert!(out.contains(&Output::Session(SessionEvent::Lost {
            reason: "pin_mismatch".into()
        })));
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn a_failed_sealed_handshake_on_a_held_session_is_retried_within_grace() {
        // Unauthenticated (a forged plain close or message 2): a lost connection, not the end.
        let mut c = active_core(false);
        c.on_closed(T0, 1, Some(1006), None);
        c.on_timeout(T0 + 250);
        let conn = opened(&drain(&mut c)).unwrap();
        c.on_open_failed(T0 + 260, conn, OpenFailure::HandshakeFailed);
        let out = drain(&mut c);
        assert!(
            !out.iter().any(|o| matches!(
                o,
                Output::State(ClientState::Closed { .. })
                    | Output::Session(SessionEvent::Lost { .. })
            )),
            "{out:?}"
        );
        assert_eq!(c.state(), &ClientState::Reconnecting);
        let retry = c.poll_timeout().expect("a retry is scheduled");
        c.on_timeout(retry);
        let again = opened(&drain(&mut c)).expect("the resume is tried again");
        assert_ne!(again, conn);
    }

    #[test]
    fn a_new_link_supersedes_a_held_session() {
        let mut c = active_core(false);
        c.connect_bootstrap(Bootstrap {
            session_id: "s2".into(),
            token: "tok2".into(),
            expires_at: u64::MAX,
            endpoint: endpoint(),
        });
        let out = drain(&mut c);
        assert_eq!(out[0], Output::State(ClientState::Connecting));
        assert_eq!(
            out[1],
            Output::Session(SessionEvent::Lost {
                reason: "superseded".into()
            })
        );
        assert!(out.contains(&Output::Close {
            conn: 1,
            code: 1000,
            reason: "superseded".into()
        }));
        assert!(matches!(out.last(), Some(Output::Open { conn: 2, .. })));
        // Frames of the old connection are ignored from now on.
        c.on_text(T0, 1, &ack("r9", false));
        assert!(drain(&mut c).is_empty());
    }

    #[test]
    fn an_ack_in_the_background_activates_without_a_close() {
        let mut c = core(0.5);
        c.connect_bootstrap(Bootstrap {
            session_id: "s1".into(),
            token: "tok".into(),
            expires_at: u64::MAX,
            endpoint: endpoint(),
        });
        let conn = opened(&drain(&mut c)).unwrap();
        c.on_open(conn);
        c.set_foreground(T0, false);
        c.on_text(T0, conn, &ack("r1", false));
        let out = drain(&mut c);
        assert!(out.contains(&Output::State(ClientState::Active)));
        assert!(!out.iter().any(|o| matches!(o, Output::Close { .. })));
        // Returning to the foreground while active does nothing.
        c.set_foreground(T0 + 1, true);
        assert!(drain(&mut c).is_empty());
    }

    #[test]
    fn foregrounding_after_the_grace_window_loses_the_session() {
        let mut c = active_core(false);
        c.set_foreground(T0, false);
        let out = drain(&mut c);
        assert_eq!(
            out[0],
            Output::Close {
                conn: 1,
                code: 1001,
                reason: "app_backgrounded".into()
            }
        );
        assert_eq!(out[1], Output::State(ClientState::Reconnecting));
        // The driver may not have run timers while the app was suspended.
        c.set_foreground(T0 + 10_000, true);
        let out = drain(&mut c);
        assert_eq!(
            out[..2],
            [
                Output::State(ClientState::Closed {
                    reason: "grace_expired".into()
                }),
                Output::Session(SessionEvent::Lost {
                    reason: "grace_expired".into()
                }),
            ]
        );
    }

    #[test]
    fn post_event_refuses_bad_names_and_inactive_sessions() {
        let mut c = core(0.5);
        assert_eq!(c.post_event(T0, "e", None), Err(EventError::NotActive));
        assert!(drain(&mut c).is_empty(), "not active: no error report");
        assert_eq!(c.post_event(T0, "", None), Err(EventError::InvalidName));
        assert!(matches!(drain(&mut c)[..], [Output::Error(_)]));
        let mut c = active_core(false);
        c.post_event(T0 + 5, "e", Some(json!({"k": 1}))).unwrap();
        let frames = sent(&drain(&mut c));
        assert_eq!(
            frames[0],
            json!({"type": "event", "session_id": "s1", "name": "e", "payload": {"k": 1}, "ts": T0 + 5})
        );
    }
}
