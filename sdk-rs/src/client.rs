//! The tokio driver around the session [`Core`]: a [`Client`] opens sockets, runs timers,
//! spawns tool handlers and reports states and events. Every rule lives in the core; this file
//! only moves bytes and time into it and its outputs out.
//!
//! Concurrency: the core sits behind one `std` mutex, never held across an `.await` and never
//! held while app code runs. Each connection is one task that reads its socket and writes, in
//! order, the frames the core queued for it; one task runs the core's timers.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use appduct_protocol::control::Transport;
use appduct_protocol::descriptor::{
    EventDescriptor, ToolDescriptor, validate_event_descriptor, validate_tool_descriptor,
};
use appduct_protocol::frames::DeviceInfo;
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::limits::CLOSE_HANDSHAKE_WAIT_MS;
use appduct_protocol::link::{self, AnyParsedLink, LinkError, RefusalReason};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::cancel::CancellationToken;
use crate::clock::{Clock, TokioClock, default_random};
use crate::core::{Bootstrap, CallStart, ConnId, ConnectId, Core, Endpoint, OpenFailure, Output};
use crate::refusal::send_link_refused;
use crate::registry::RegistrationId;
use crate::sealed::{SealedEvent, SealedSocket};
use crate::transport::{DeviceSocket, DialError, DialOptions, dial};
use crate::trust::{Trust, is_private_lan_address};
use crate::types::{
    ClientEvent, ClientState, ConnectError, ErrorPhase, ErrorReport, EventError, RegistrationError,
    SessionInfo, ToolError, ToolOutput,
};

// -------------------------------------------------------------------------------------------------
// Handlers and their context
// -------------------------------------------------------------------------------------------------

/// The future a tool handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

/// A tool's implementation: `async |args, ctx| -> Result<Value, ToolError>`.
///
/// `args` is the call's `args` object, or `null` for a tool without an input schema (which
/// only ever receives `{}`, §T5.2). Without an output schema the handler must return
/// `null`; any other value is answered with `tool_output_validation_error`.
pub trait ToolHandler: Send + Sync + 'static {
    fn call(&self, args: Value, ctx: CallContext) -> HandlerFuture;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(&self, args: Value, ctx: CallContext) -> HandlerFuture {
        Box::pin(self(args, ctx))
    }
}

/// The future a content tool handler returns (issue #17).
pub type ContentHandlerFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;

/// A content tool's implementation: `async |args, ctx| -> Result<ToolOutput, ToolError>`
/// ([`Client::register_content_tool`]; device.md §D17). The output-schema rule of
/// [`ToolHandler`] applies to [`ToolOutput::result`].
pub trait ContentToolHandler: Send + Sync + 'static {
    fn call(&self, args: Value, ctx: CallContext) -> ContentHandlerFuture;
}

impl<F, Fut> ContentToolHandler for F
where
    F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    fn call(&self, args: Value, ctx: CallContext) -> ContentHandlerFuture {
        Box::pin(self(args, ctx))
    }
}

/// A JSON tool's handler, held like a content tool's.
struct JsonHandler<H>(H);

impl<H: ToolHandler> ContentToolHandler for JsonHandler<H> {
    fn call(&self, args: Value, ctx: CallContext) -> ContentHandlerFuture {
        let fut = self.0.call(args, ctx);
        Box::pin(async move { fut.await.map(ToolOutput::json) })
    }
}

/// What a handler knows about its call (§T5.1).
#[derive(Clone)]
pub struct CallContext {
    call_id: String,
    tool_name: String,
    session_id: String,
    received_at_ms: u64,
    timeout_ms: u64,
    token: CancellationToken,
    shared: Weak<Shared>,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("call_id", &self.call_id)
            .field("tool_name", &self.tool_name)
            .field("session_id", &self.session_id)
            .field("received_at_ms", &self.received_at_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("cancelled", &self.token.reason())
            .finish()
    }
}

impl CallContext {
    /// The `tool_call` frame's id (the daemon's wire id).
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// The session the call arrived on.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// When the frame was received, unix milliseconds.
    pub fn received_at_ms(&self) -> u64 {
        self.received_at_ms
    }

    /// The app-side deadline, in milliseconds from `received_at_ms`.
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// Fires on `tool_cancel` (its reason), the deadline (`timeout`), socket loss or
    /// backgrounding (`session_suspended`), `disconnect()` or a superseding link (`closed`).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.token
    }

    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    pub fn cancel_reason(&self) -> Option<String> {
        self.token.reason()
    }

    /// Resolves with the abort reason once the call is aborted.
    pub async fn cancelled(&self) -> String {
        self.token.cancelled().await
    }

    /// Best-effort `tool_call_progress` (§D13.5): sent only while the call is in flight and
    /// the socket is active; returns whether it went out. A non-finite `progress` is omitted
    /// and `message` is cut to 4096 UTF-16 code units.
    pub fn progress(&self, progress: Option<f64>, message: Option<&str>) -> bool {
        match self.shared.upgrade() {
            Some(shared) => {
                shared.with_host(|host, _| host.core.progress(&self.call_id, progress, message))
            }
            None => false,
        }
    }
}

// -------------------------------------------------------------------------------------------------
// Builder
// -------------------------------------------------------------------------------------------------

/// Why a client could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// `Trust::Pin` with no pins is a configuration error (§D3.4).
    #[error("trust mode pin needs at least one pin")]
    EmptyPinSet,
    #[error("no tokio runtime: build the client inside one, or pass a handle with .runtime()")]
    NoRuntime,
}

/// Options of [`Client::connect_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// `native` (default for v2 links): `wss://` with the pin check; `web`: loopback `ws://`;
    /// `sealed` (the only one, and the default, for sealed links): `ws://` to the wss port with
    /// a Noise channel inside (issue #23).
    pub transport: Option<Transport>,
}

type RandomFn = Box<dyn FnMut() -> f64 + Send>;

/// Configures a [`Client`].
pub struct ClientBuilder {
    trust: Trust,
    allow_private_lan_only: bool,
    device: DeviceInfo,
    clock: Option<Arc<dyn Clock>>,
    random: Option<RandomFn>,
    runtime: Option<Handle>,
    dial: DialOptions,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("trust", &self.trust)
            .field("allow_private_lan_only", &self.allow_private_lan_only)
            .field("device", &self.device)
            .field("dial", &self.dial)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            trust: Trust::Link,
            allow_private_lan_only: true,
            device: DeviceInfo::default(),
            clock: None,
            random: None,
            runtime: None,
            dial: DialOptions::default(),
        }
    }
}

impl ClientBuilder {
    /// Trust mode (default [`Trust::Link`]). Embedded pins ([`Trust::Pin`]) always win.
    pub fn trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// Shorthand for `trust(Trust::Pin(pins))`.
    pub fn pins(self, pins: impl IntoIterator<Item = appduct_protocol::pin::SpkiPin>) -> Self {
        self.trust(Trust::Pin(pins.into_iter().collect()))
    }

    /// `allowPrivateLanOnly` (default `true`).
    pub fn allow_private_lan_only(mut self, allow: bool) -> Self {
        self.allow_private_lan_only = allow;
        self
    }

    /// Device fields of the claim; each is cut to 256 UTF-16 code units, empty ones omitted.
    pub fn device(
        mut self,
        manufacturer: Option<&str>,
        model: Option<&str>,
        os: Option<&str>,
    ) -> Self {
        self.device = DeviceInfo::default()
            .with_manufacturer(manufacturer.map(str::to_owned))
            .with_model(model.map(str::to_owned))
            .with_os(os.map(str::to_owned));
        self
    }

    /// The clock (default [`TokioClock`], which follows tokio's paused time).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The backoff jitter source, uniform in [0, 1) (tests pin it, e.g. `|| 0.0`).
    pub fn jitter(mut self, random: impl FnMut() -> f64 + Send + 'static) -> Self {
        self.random = Some(Box::new(random));
        self
    }

    /// The runtime tasks are spawned on (default: the current one at `build`).
    pub fn runtime(mut self, handle: Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// Bound on opening one socket: TCP, TLS and the upgrade (default 10 s).
    pub fn dial_timeout(mut self, timeout: Duration) -> Self {
        self.dial.timeout = timeout;
        self
    }

    /// Accepts any daemon certificate, for hostility tests only. Never use it in an app.
    #[cfg(feature = "testing")]
    pub fn danger_skip_pin_check(mut self) -> Self {
        self.dial.skip_pin_check = true;
        self
    }

    pub fn build(self) -> Result<Client, BuildError> {
        if matches!(&self.trust, Trust::Pin(pins) if pins.is_empty()) {
            return Err(BuildError::EmptyPinSet);
        }
        let runtime = match self.runtime {
            Some(handle) => handle,
            None => Handle::try_current().map_err(|_| BuildError::NoRuntime)?,
        };
        let random = self
            .random
            .unwrap_or_else(|| Box::new(default_random()) as RandomFn);
        let clock = match self.clock {
            Some(clock) => clock,
            None => Arc::new(TokioClock::new()),
        };
        let (state_tx, _) = watch::channel(ClientState::Idle);
        let timer = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            host: Mutex::new(Host {
                core: Core::new(self.device, random),
                conns: HashMap::new(),
                handlers: HashMap::new(),
                calls: HashMap::new(),
                waiters: HashMap::new(),
                listeners: Vec::new(),
                timer_armed: None,
            }),
            clock,
            runtime: runtime.clone(),
            timer: timer.clone(),
            state_tx,
            trust: self.trust,
            allow_private_lan_only: self.allow_private_lan_only,
            dial: self.dial,
        });
        runtime.spawn(run_timers(Arc::downgrade(&shared), timer));
        Ok(Client { shared })
    }
}

// -------------------------------------------------------------------------------------------------
// Shared state
// -------------------------------------------------------------------------------------------------

/// What a connection task is told to do.
#[derive(Debug)]
enum ConnCmd {
    Text(String),
    Ping,
    Close {
        code: u16,
        reason: String,
    },
    #[cfg(feature = "testing")]
    Raw(crate::testing::RawFrame),
}

struct Host {
    core: Core,
    conns: HashMap<ConnId, mpsc::UnboundedSender<ConnCmd>>,
    handlers: HashMap<RegistrationId, Arc<dyn ContentToolHandler>>,
    /// Tokens of running handlers, by wire id.
    calls: HashMap<String, CancellationToken>,
    waiters: HashMap<ConnectId, oneshot::Sender<Result<SessionInfo, ConnectError>>>,
    listeners: Vec<mpsc::UnboundedSender<ClientEvent>>,
    /// The deadline the timer task sleeps until (`None`: it waits for a notification only).
    /// Waking it is needed only when the core's next deadline comes earlier.
    timer_armed: Option<u64>,
}

struct Shared {
    host: Mutex<Host>,
    clock: Arc<dyn Clock>,
    runtime: Handle,
    timer: Arc<Notify>,
    state_tx: watch::Sender<ClientState>,
    trust: Trust,
    allow_private_lan_only: bool,
    dial: DialOptions,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Lets the timer task notice the client is gone.
        self.timer.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Host> {
        // A panic while holding the lock leaves the core consistent enough to keep going:
        // every core method finishes its state change before queuing outputs.
        self.host
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the core at the current time, then executes every output it queued.
    fn with_host<R>(self: &Arc<Self>, f: impl FnOnce(&mut Host, u64) -> R) -> R {
        let mut host = self.lock();
        let now = self.clock.now_ms();
        let result = f(&mut host, now);
        host.pump(self);
        // Wake the timer task only for an earlier deadline: most calls move none, and a wake
        // per frame costs a task switch. A later one just finds nothing due and re-arms.
        let earlier = match (host.core.poll_timeout(), host.timer_armed) {
            (Some(next), Some(armed)) => next < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        drop(host);
        if earlier {
            self.timer.notify_one();
        }
        result
    }
}

impl Host {
    fn emit(&mut self, event: ClientEvent) {
        self.listeners.retain(|tx| tx.send(event.clone()).is_ok());
    }

    fn send_to(&mut self, conn: ConnId, cmd: ConnCmd) {
        if let Some(tx) = self.conns.get(&conn) {
            let _ = tx.send(cmd);
        }
    }

    /// Executes the core's outputs in order.
    fn pump(&mut self, shared: &Arc<Shared>) {
        while let Some(output) = self.core.poll_output() {
            match output {
                Output::Open { conn, endpoint } => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    self.conns.insert(conn, tx);
                    shared.runtime.spawn(run_connection(
                        Arc::downgrade(shared),
                        conn,
                        endpoint,
                        shared.dial.clone(),
                        rx,
                    ));
                }
                Output::Send { conn, text } => self.send_to(conn, ConnCmd::Text(text)),
                Output::Ping { conn } => self.send_to(conn, ConnCmd::Ping),
                Output::Close { conn, code, reason } => {
                    self.send_to(conn, ConnCmd::Close { code, reason });
                    self.conns.remove(&conn);
                }
                // Dropping the sender makes the task drop its socket without a close frame.
                Output::Abort { conn } => {
                    self.conns.remove(&conn);
                }
                Output::State(state) => {
                    shared.state_tx.send_replace(state.clone());
                    self.emit(ClientEvent::State(state));
                }
                Output::Session(event) => self.emit(ClientEvent::Session(event)),
                Output::CallStarted(start) => self.start_call(shared, start),
                Output::CallCancelled { id, reason } => {
                    if let Some(token) = self.calls.remove(&id) {
                        token.cancel(reason);
                    }
                }
                Output::ConnectFinished { connect, result } => {
                    if let Some(tx) = self.waiters.remove(&connect) {
                        let _ = tx.send(result);
                    }
                }
                Output::Error(report) => {
                    tracing::warn!(phase = ?report.phase, code = ?report.code, "{}", report.message);
                    self.emit(ClientEvent::Error(report));
                }
            }
        }
    }

    fn start_call(&mut self, shared: &Arc<Shared>, start: CallStart) {
        let Some(handler) = self.handlers.get(&start.registration).cloned() else {
            // Cannot happen: a registration's handler is stored with it. Answer anyway.
            self.core.call_finished::<ToolOutput>(
                &start.id,
                Err(ToolError::execution(format!(
                    "Tool \"{}\" has no handler.",
                    start.name
                ))),
            );
            return;
        };
        let token = CancellationToken::new();
        self.calls.insert(start.id.clone(), token.clone());
        let ctx = CallContext {
            call_id: start.id.clone(),
            tool_name: start.name.clone(),
            session_id: start.session_id,
            received_at_ms: start.received_at_ms,
            timeout_ms: start.timeout_ms,
            token,
            shared: Arc::downgrade(shared),
        };
        let args = if start.has_input_schema {
            Value::Object(start.args)
        } else {
            Value::Null
        };
        let weak = Arc::downgrade(shared);
        let id = start.id;
        let name = start.name;
        shared.runtime.spawn(async move {
            // The handler runs in its own task: never under the core's lock.
            let outcome = AssertUnwindSafe(async move { handler.call(args, ctx).await })
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(ToolError::execution(format!("Tool \"{name}\" panicked.")))
                });
            if let Some(shared) = weak.upgrade() {
                shared.with_host(|host, _| {
                    host.calls.remove(&id);
                    host.core.call_finished(&id, outcome);
                });
            }
        });
    }
}

// -------------------------------------------------------------------------------------------------
// Tasks
// -------------------------------------------------------------------------------------------------

/// Fires the core's timers at their deadlines.
async fn run_timers(weak: Weak<Shared>, notify: Arc<Notify>) {
    loop {
        let (deadline, now) = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            let mut host = shared.lock();
            let deadline = host.core.poll_timeout();
            // Set under the lock that `with_host` checks it under; a notification sent after
            // this is kept by `Notify` until the wait below.
            host.timer_armed = deadline;
            drop(host);
            (deadline, shared.clock.now_ms())
        };
        match deadline {
            None => notify.notified().await,
            Some(at) if at <= now => {
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                shared.with_host(|host, now| host.core.on_timeout(now));
            }
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(at - now)) => {}
                    () = notify.notified() => {}
                }
            }
        }
    }
}

/// Reports to the core; `false` once the client is gone.
fn report(weak: &Weak<Shared>, f: impl FnOnce(&mut Core, u64)) -> bool {
    match weak.upgrade() {
        Some(shared) => {
            shared.with_host(|host, now| f(&mut host.core, now));
            true
        }
        None => false,
    }
}

/// Owns one connection: opens it, then writes what the core queued and reads what the daemon
/// sends until either side ends it.
async fn run_connection(
    weak: Weak<Shared>,
    conn: ConnId,
    endpoint: Endpoint,
    options: DialOptions,
    mut commands: mpsc::UnboundedReceiver<ConnCmd>,
) {
    if endpoint.transport == Transport::Sealed {
        run_sealed_connection(weak, conn, endpoint, options, commands).await;
        return;
    }
    let opened = tokio::select! {
        // Before the open, the core can only abandon the attempt.
        _ = commands.recv() => return,
        result = dial(&endpoint, &options) => result,
    };
    let mut socket = match opened {
        Ok(socket) => socket,
        Err(e) => {
            report(&weak, |core, now| {
                core.on_open_failed(now, conn, open_failure(e))
            });
            return;
        }
    };
    if !report(&weak, |core, _| core.on_open(conn)) {
        return;
    }
    loop {
        tokio::select! {
            command = commands.recv() => {
                let sent = match command {
                    Some(ConnCmd::Text(text)) => socket.send(Message::text(text)).await,
                    Some(ConnCmd::Ping) => socket.send(Message::Ping(Default::default())).await,
                    Some(ConnCmd::Close { code, reason }) => {
                        close_socket(socket, code, &reason).await;
                        return;
                    }
                    #[cfg(feature = "testing")]
                    Some(ConnCmd::Raw(frame)) => crate::testing::send_raw(&mut socket, frame).await,
                    // Abandoned by the core, or the client is gone: drop without a close frame.
                    None => return,
                };
                if sent.is_err() {
                    report(&weak, |core, now| core.on_closed(now, conn, None, None));
                    return;
                }
            }
            message = socket.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    if !report(&weak, |core, now| core.on_text(now, conn, text.as_str())) {
                        return;
                    }
                }
                Some(Ok(Message::Pong(_))) => {
                    report(&weak, |core, _| core.on_pong(conn));
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = match &frame {
                        Some(f) => (Some(u16::from(f.code)), Some(f.reason.as_str())),
                        None => (None, None),
                    };
                    report(&weak, |core, now| core.on_closed(now, conn, code, reason));
                    // Let tungstenite answer the close before the socket goes.
                    drain(&mut socket).await;
                    return;
                }
                // Pings are answered by tungstenite itself on the next read; binary frames and
                // raw frames are not part of the daemon's protocol.
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    report(&weak, |core, now| core.on_closed(now, conn, None, None));
                    return;
                }
            }
        }
    }
}

fn open_failure(e: DialError) -> OpenFailure {
    match e {
        DialError::PinMismatch => OpenFailure::PinMismatch,
        DialError::HandshakeFailed => OpenFailure::HandshakeFailed,
        DialError::Failed(detail) => OpenFailure::Other(detail),
    }
}

/// [`run_connection`] for the sealed transport (issue #23): the same core, with every frame
/// sealed into records. Only a close record carries the daemon's close code; a WebSocket close
/// or loss without one, and a record that breaks the rules, are a lost connection (1006).
async fn run_sealed_connection(
    weak: Weak<Shared>,
    conn: ConnId,
    endpoint: Endpoint,
    options: DialOptions,
    mut commands: mpsc::UnboundedReceiver<ConnCmd>,
) {
    let opened = tokio::select! {
        _ = commands.recv() => return,
        result = SealedSocket::connect(&endpoint, &options) => result,
    };
    let mut socket = match opened {
        Ok(socket) => socket,
        Err(e) => {
            report(&weak, |core, now| {
                core.on_open_failed(now, conn, open_failure(e))
            });
            return;
        }
    };
    if !report(&weak, |core, _| core.on_open(conn)) {
        return;
    }
    loop {
        tokio::select! {
            command = commands.recv() => {
                let sent = match command {
                    Some(ConnCmd::Text(text)) => socket.send_text(&text).await,
                    Some(ConnCmd::Ping) => socket.ping().await,
                    Some(ConnCmd::Close { code, reason }) => {
                        socket.close(code, &reason).await;
                        return;
                    }
                    #[cfg(feature = "testing")]
                    Some(ConnCmd::Raw(frame)) => {
                        crate::testing::send_raw(socket.socket_mut(), frame).await
                    }
                    None => return,
                };
                if sent.is_err() {
                    report(&weak, |core, now| core.on_closed(now, conn, None, None));
                    return;
                }
            }
            event = socket.next() => match event {
                SealedEvent::Text(text) => {
                    if !report(&weak, |core, now| core.on_text(now, conn, &text)) {
                        return;
                    }
                }
                SealedEvent::Pong => {
                    report(&weak, |core, _| core.on_pong(conn));
                }
                SealedEvent::CloseRecord { code, reason } => {
                    report(&weak, |core, now| core.on_closed(now, conn, Some(code), Some(&reason)));
                    socket.finish().await;
                    return;
                }
                SealedEvent::Violation(error) => {
                    tracing::debug!(conn, %error, "closing a sealed connection that broke the record rules");
                    report(&weak, |core, now| core.on_closed(now, conn, None, None));
                    socket.fail(error).await;
                    return;
                }
                SealedEvent::Lost => {
                    report(&weak, |core, now| core.on_closed(now, conn, None, None));
                    return;
                }
            }
        }
    }
}

/// Sends a close frame and waits briefly for the peer's.
async fn close_socket(mut socket: DeviceSocket, code: u16, reason: &str) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    if socket.close(Some(frame)).await.is_ok() {
        drain(&mut socket).await;
    }
}

async fn drain(socket: &mut DeviceSocket) {
    let wait = Duration::from_millis(CLOSE_HANDSHAKE_WAIT_MS);
    let _ = tokio::time::timeout(wait, async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
}

// -------------------------------------------------------------------------------------------------
// Client
// -------------------------------------------------------------------------------------------------

/// Where and how to refuse a link.
struct Refusal {
    address: IpAddr,
    port: u16,
    session_id: String,
    token: ClaimToken,
}

/// The outcome of a started `connect`: resolves when the claim is acked or ends without one.
#[derive(Debug)]
pub struct PendingConnect {
    rx: oneshot::Receiver<Result<SessionInfo, ConnectError>>,
}

impl Future for PendingConnect {
    type Output = Result<SessionInfo, ConnectError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ConnectError::ClientGone)))
    }
}

/// The disposer of one tool registration. Removing it after the same name was registered
/// again is a no-op; so is removing it twice. Dropping it keeps the tool registered.
#[derive(Clone)]
pub struct ToolRegistration {
    id: RegistrationId,
    name: String,
    shared: Weak<Shared>,
}

impl fmt::Debug for ToolRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRegistration")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

impl ToolRegistration {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Unregisters the tool; while active, a `remove` delta goes out. Returns whether this
    /// registration was still current.
    pub fn remove(&self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        shared.with_host(|host, _| {
            let removed = host.core.remove_tool(self.id);
            if removed {
                host.handlers.remove(&self.id);
            }
            removed
        })
    }
}

/// The disposer of one event declaration; same rules as [`ToolRegistration`].
#[derive(Clone)]
pub struct EventRegistration {
    id: RegistrationId,
    name: String,
    shared: Weak<Shared>,
}

impl fmt::Debug for EventRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventRegistration")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

impl EventRegistration {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Withdraws the declaration; returns whether it was still current.
    pub fn remove(&self) -> bool {
        match self.shared.upgrade() {
            Some(shared) => shared.with_host(|host, _| host.core.remove_event(self.id)),
            None => false,
        }
    }
}

/// An appduct app client. Cheap to clone; all clones drive the same session.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

fn link_error(e: LinkError) -> ConnectError {
    match e {
        LinkError::InvalidUrl => ConnectError::InvalidUrl,
        LinkError::MissingPayload => ConnectError::MissingPayload,
        LinkError::InvalidPayload(d) => ConnectError::InvalidPayload(d),
    }
}

/// IPv4-mapped IPv6 addresses travel as IPv4 (§D4.3).
fn canonical_address(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    // --- connecting ---------------------------------------------------------------------------

    /// Connects over the native transport: parses and fully validates `link` (a deep link, a
    /// page URL with `#appduct=`, or a bare payload), then claims. Resolves once acked.
    pub async fn connect(&self, link: &str) -> Result<SessionInfo, ConnectError> {
        self.start_connect(link, ConnectOptions::default())?.await
    }

    /// [`Client::connect`] with options (e.g. the web transport).
    pub async fn connect_with(
        &self,
        link: &str,
        options: ConnectOptions,
    ) -> Result<SessionInfo, ConnectError> {
        self.start_connect(link, options)?.await
    }

    /// Validates `link` and starts the claim without waiting for it. Validation errors are
    /// returned before anything touches a held session (§D13.1): parse, pin rules,
    /// `allow_private_lan_only`, expiry.
    ///
    /// A sealed link (payload version `0x03`, issue #23) selects the sealed transport by itself;
    /// asking for another transport with it, or for the sealed transport with a v2 link, is
    /// `unsupported_link`.
    pub fn start_connect(
        &self,
        link: &str,
        options: ConnectOptions,
    ) -> Result<PendingConnect, ConnectError> {
        let (decoded, pin, sealed_key) =
            match link::parse_any_connect_input(link).map_err(link_error)? {
                AnyParsedLink::V2(parsed) => (parsed.decoded, parsed.pin, None),
                AnyParsedLink::Sealed(parsed) => (
                    parsed.decoded.payload,
                    None,
                    Some(parsed.decoded.static_key),
                ),
            };
        let transport = match (options.transport, sealed_key) {
            (None | Some(Transport::Sealed), Some(_)) => Transport::Sealed,
            (Some(_), Some(_)) => {
                return Err(ConnectError::UnsupportedLink(
                    "a sealed link is used over the sealed transport only",
                ));
            }
            (Some(Transport::Sealed), None) => {
                return Err(ConnectError::UnsupportedLink(
                    "the sealed transport needs a sealed link",
                ));
            }
            (transport, None) => transport.unwrap_or(Transport::Native),
        };
        let address = canonical_address(decoded.address);
        let pins = match transport {
            Transport::Native => self.native_pins(pin)?,
            Transport::Web => {
                if address != IpAddr::from([127, 0, 0, 1]) {
                    return Err(ConnectError::UnsupportedLink(
                        "a web-transport link must carry 127.0.0.1",
                    ));
                }
                Vec::new()
            }
            Transport::Sealed => Vec::new(),
        };
        if self.shared.allow_private_lan_only && !is_private_lan_address(address) {
            return Err(ConnectError::AddressNotAllowed(address));
        }
        let expires_at = decoded.expires_at;
        let refusal = Refusal {
            address,
            port: decoded.port,
            session_id: decoded.session_id.clone(),
            token: decoded.token.clone(),
        };
        if decoded.is_expired(self.shared.clock.now_ms() / 1000) {
            self.refuse(refusal, RefusalReason::LinkExpired);
            return Err(ConnectError::ExpiredPayload { expires_at });
        }
        let pending = self.connect_bootstrap(Bootstrap {
            session_id: decoded.session_id.clone(),
            token: decoded.token.to_base64url(),
            expires_at,
            endpoint: Endpoint {
                transport,
                address,
                port: decoded.port,
                pins,
                sealed_key,
            },
        });
        Ok(self.refuse_on_failure(pending, refusal))
    }

    /// Sends a `link_refused` frame in the background (best effort; issue #23).
    fn refuse(&self, refusal: Refusal, reason: RefusalReason) {
        let timeout = self.shared.dial.timeout;
        self.shared.runtime.spawn(async move {
            let outcome = send_link_refused(
                refusal.address,
                refusal.port,
                &refusal.session_id,
                &refusal.token,
                reason,
                timeout,
            )
            .await;
            tracing::debug!(%reason, ?outcome, "appduct: link refusal sent");
        });
    }

    /// Passes the claim's outcome on, and refuses the link when the daemon could not be trusted
    /// with it: a failed sealed handshake or a pin mismatch.
    fn refuse_on_failure(&self, pending: PendingConnect, refusal: Refusal) -> PendingConnect {
        let (tx, rx) = oneshot::channel();
        // Weak: a pending claim must not keep a dropped client alive.
        let weak = Arc::downgrade(&self.shared);
        self.shared.runtime.spawn(async move {
            let result = pending.await;
            let reason = match &result {
                Err(ConnectError::HandshakeFailed) => Some(RefusalReason::HandshakeFailed),
                Err(ConnectError::PinMismatch) => Some(RefusalReason::PinMismatch),
                _ => None,
            };
            if let (Some(reason), Some(shared)) = (reason, weak.upgrade()) {
                Client { shared }.refuse(refusal, reason);
            }
            let _ = tx.send(result);
        });
        PendingConnect { rx }
    }

    /// The pins a native connection trusts (§D3.4): embedded pins win; in `link` mode the
    /// link's pin, with a warning each time, and no connection at all without one.
    fn native_pins(
        &self,
        link_pin: Option<appduct_protocol::pin::SpkiPin>,
    ) -> Result<Vec<appduct_protocol::pin::SpkiPin>, ConnectError> {
        match (&self.shared.trust, link_pin) {
            (Trust::Pin(pins), _) => Ok(pins.clone()),
            (Trust::Link, Some(pin)) => {
                tracing::warn!(
                    %pin,
                    "appduct: trusting the pin carried by the link for this session (trust mode \
                     link); embed pins with Trust::Pin to pin the daemon's key"
                );
                Ok(vec![pin])
            }
            (Trust::Link, None) if self.shared.dial.skip_pin_check => Ok(Vec::new()),
            (Trust::Link, None) => Err(ConnectError::MissingPin),
        }
    }

    /// Starts a claim from an already decoded bootstrap. No link rule runs: the caller vouches
    /// for the endpoint and pins (§T2.1 `connectBootstrap`).
    pub fn connect_bootstrap(&self, bootstrap: Bootstrap) -> PendingConnect {
        let (tx, rx) = oneshot::channel();
        self.shared.with_host(|host, _| {
            let id = host.core.connect_bootstrap(bootstrap);
            host.waiters.insert(id, tx);
        });
        PendingConnect { rx }
    }

    /// If `url` carries an `appduct` parameter, starts `connect` and returns `true`; failures
    /// go to the error listener (phase `bootstrap`) instead of a return value.
    pub fn handle_url(&self, url: &str) -> bool {
        if !link::handle_url(url) {
            return false;
        }
        let report_failure = |shared: &Arc<Shared>, e: ConnectError| {
            shared.with_host(|host, _| {
                host.emit(ClientEvent::Error(ErrorReport {
                    phase: ErrorPhase::Bootstrap,
                    code: Some(e.code().to_owned()),
                    message: e.to_string(),
                    tool_name: None,
                    call_id: None,
                }));
            });
        };
        match self.start_connect(url, ConnectOptions::default()) {
            Ok(pending) => {
                let weak = Arc::downgrade(&self.shared);
                self.shared.runtime.spawn(async move {
                    if let Err(e) = pending.await
                        && let Some(shared) = weak.upgrade()
                    {
                        report_failure(&shared, e);
                    }
                });
            }
            Err(e) => report_failure(&self.shared, e),
        }
        true
    }

    /// Ends the session locally: state `closed` (`closed_by_app`), the socket closes with
    /// 1000, calls abort with `closed`. The daemon keeps the session suspended until its grace
    /// window ends.
    pub fn disconnect(&self) {
        self.shared.with_host(|host, _| host.core.disconnect());
    }

    /// App lifecycle (§D13.4): leaving the foreground suspends a held session (close 1001
    /// `app_backgrounded`, no resume while in the background); returning resumes at once.
    pub fn set_foreground(&self, foreground: bool) {
        self.shared
            .with_host(|host, now| host.core.set_foreground(now, foreground));
    }

    pub fn background(&self) {
        self.set_foreground(false);
    }

    pub fn foreground(&self) {
        self.set_foreground(true);
    }

    // --- observing ----------------------------------------------------------------------------

    pub fn state(&self) -> ClientState {
        self.shared.state_tx.borrow().clone()
    }

    /// A watch of the state; it changes only when the state does.
    pub fn watch_state(&self) -> watch::Receiver<ClientState> {
        self.shared.state_tx.subscribe()
    }

    /// Every state change, session event and error from now on, in order. Unbounded: keep
    /// reading it, or drop it.
    pub fn events(&self) -> mpsc::UnboundedReceiver<ClientEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared.lock().listeners.push(tx);
        rx
    }

    /// The held session (active or reconnecting).
    pub fn session(&self) -> Option<SessionInfo> {
        self.shared.lock().core.session()
    }

    pub fn is_foreground(&self) -> bool {
        self.shared.lock().core.is_foreground()
    }

    /// Registered tools in wire form, in registration order.
    pub fn registered_tools(&self) -> Vec<ToolDescriptor> {
        self.shared.lock().core.tools()
    }

    /// Declared events in wire form, in declaration order.
    pub fn declared_events(&self) -> Vec<EventDescriptor> {
        self.shared.lock().core.events()
    }

    // --- tools and events ---------------------------------------------------------------------

    /// Registers a tool from its wire descriptor (§D8.1), validated before anything is
    /// committed or sent. Registering a name again replaces it.
    pub fn register_tool(
        &self,
        descriptor: &Value,
        handler: impl ToolHandler,
    ) -> Result<ToolRegistration, RegistrationError> {
        let tool = validate_tool_descriptor(descriptor)?;
        self.register_validated(tool, Arc::new(JsonHandler(handler)))
    }

    /// [`Client::register_tool`] for a handler that returns content blocks (text, images,
    /// resource links) and optionally a JSON result (issue #17, device.md §D17).
    pub fn register_content_tool(
        &self,
        descriptor: &Value,
        handler: impl ContentToolHandler,
    ) -> Result<ToolRegistration, RegistrationError> {
        let tool = validate_tool_descriptor(descriptor)?;
        self.register_validated(tool, Arc::new(handler))
    }

    /// [`Client::register_tool`] for a typed descriptor; it passes the same validator.
    pub fn register_tool_descriptor(
        &self,
        descriptor: &ToolDescriptor,
        handler: impl ToolHandler,
    ) -> Result<ToolRegistration, RegistrationError> {
        let tool = validate_tool_descriptor(&descriptor.to_value())?;
        self.register_validated(tool, Arc::new(JsonHandler(handler)))
    }

    fn register_validated(
        &self,
        tool: ToolDescriptor,
        handler: Arc<dyn ContentToolHandler>,
    ) -> Result<ToolRegistration, RegistrationError> {
        let name = tool.name.clone();
        let id = self.shared.with_host(|host, _| {
            let replaced = host.core.tool(&tool.name).map(|(id, _)| id);
            let id = host.core.register_tool(tool)?;
            if let Some(old) = replaced {
                host.handlers.remove(&old);
            }
            host.handlers.insert(id, handler);
            Ok::<_, RegistrationError>(id)
        })?;
        Ok(ToolRegistration {
            id,
            name,
            shared: Arc::downgrade(&self.shared),
        })
    }

    /// Declares an event from its wire descriptor (§D8.2). Advisory: the daemon never
    /// checks posted events against it.
    pub fn declare_event(
        &self,
        descriptor: &Value,
    ) -> Result<EventRegistration, RegistrationError> {
        let event = validate_event_descriptor(descriptor)?;
        let name = event.name.clone();
        let id = self
            .shared
            .with_host(|host, _| host.core.declare_event(event))?;
        Ok(EventRegistration {
            id,
            name,
            shared: Arc::downgrade(&self.shared),
        })
    }

    /// Sends `event {name, payload?, ts: now}`. Never panics: when not active the event is
    /// dropped; a bad name or an encoded frame over 262144 bytes is refused and reported to
    /// the error listener, and the connection stays open.
    pub fn post_event(&self, name: &str, payload: Option<Value>) -> Result<(), EventError> {
        self.shared
            .with_host(|host, now| host.core.post_event(now, name, payload))
    }

    // --- testing ------------------------------------------------------------------------------

    /// Sends a frame as is on the open connection, bypassing every check (testing feature).
    /// Returns whether a connection was open.
    #[cfg(feature = "testing")]
    pub fn send_raw(&self, frame: crate::testing::RawFrame) -> bool {
        let mut host = self.shared.lock();
        let Some(conn) = host.core.open_connection() else {
            return false;
        };
        host.send_to(conn, ConnCmd::Raw(frame));
        true
    }
}
