//! One device connection from accept to close (§D6, §D6.2, §D9): the pre-claim stage with its
//! deadline, claim or resume, then the acked stage with keepalive, frame handling and every way
//! the socket can end. Session state changes go through [`Inner`], under the engine lock.

use appduct_protocol::parts::PartError;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use appduct_protocol::close::{self, CloseReason};
use appduct_protocol::control::{SuspendReason, Transport};
use appduct_protocol::frames::{
    AppFrame, FrameRefusal, Phase, Problem, Rejection, decode_app_message,
};
use appduct_protocol::limits::{CLOSE_HANDSHAKE_WAIT_MS, MAX_MISSED_PONGS};
use futures_util::FutureExt;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use super::refusals::{Report, claim_refusal, resume_refusal};
use super::{Inner, SessionManager};
use crate::device_socket::{
    Channel, DeviceReceiver, DeviceSender, DeviceSocket, Incoming, SendError, WireMessage,
};

/// Answers breaking a bound that are logged per device connection (the calls still fail).
const MAX_BOUND_FAILURES_LOGGED: u32 = 20;

/// How long the engine waits for the peer's close (and for room to queue its own) after closing.
const CLOSE_WAIT: Duration = Duration::from_millis(CLOSE_HANDSHAKE_WAIT_MS);
/// Text bytes an active session's task handles before it yields to the other tasks.
const YIELD_AFTER_BYTES: usize = 256 * 1024;

/// Unregisters the connection when its task ends, however it ends.
struct Registration {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.inner.unregister_connection(self.id);
    }
}

struct Connection {
    inner: Arc<Inner>,
    id: u64,
    transport: Transport,
    channel: Channel,
    receiver: DeviceReceiver,
    sender: DeviceSender,
    /// Set by whoever takes the socket away (resume elsewhere, revoke, shutdown): the close to
    /// send. The session is already detached from this connection by then.
    stop: watch::Receiver<Option<CloseReason>>,
}

/// Runs one connection to its end. `guard` (the pre-claim slot) is dropped once the first
/// message has been processed or the connection ends.
pub(super) async fn run<G>(
    inner: Arc<Inner>,
    socket: DeviceSocket,
    transport: Transport,
    claim_deadline: Instant,
    guard: G,
) {
    let channel = socket.channel();
    let (mut receiver, sender) = socket.split();
    let Some((id, stop)) = inner.register_connection(&sender) else {
        drop(guard);
        close_and_drain(&sender, &mut receiver, CloseReason::DaemonShutdown).await;
        return;
    };
    let _registration = Registration {
        inner: Arc::clone(&inner),
        id,
    };
    let mut conn = Connection {
        inner,
        id,
        transport,
        channel,
        receiver,
        sender,
        stop,
    };
    // A panic below is a bug on this connection only: it must not leave its session ACTIVE
    // on a dead socket, and no other connection notices it.
    let handled = AssertUnwindSafe(async {
        let acked = conn.pre_ack(claim_deadline, guard).await;
        if let Some(session_id) = acked {
            conn.acked(&session_id).await;
        }
    })
    .catch_unwind()
    .await;
    if handled.is_err() {
        conn.fault().await;
    }
}

/// Resolves with the close reason once a stop is requested; never if the control is gone.
async fn stopped(stop: &mut watch::Receiver<Option<CloseReason>>) -> CloseReason {
    loop {
        if let Some(reason) = *stop.borrow_and_update() {
            return reason;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Queues a close frame, terminating instead when it cannot even be queued in time.
async fn send_close(sender: &DeviceSender, reason: CloseReason) {
    if tokio::time::timeout(CLOSE_WAIT, sender.close(reason))
        .await
        .is_err()
    {
        sender.terminate();
    }
}

/// Sends a close frame, then waits at most [`CLOSE_WAIT`] for the peer's close before the
/// connection is dropped (§D6).
async fn close_and_drain(
    sender: &DeviceSender,
    receiver: &mut DeviceReceiver,
    reason: CloseReason,
) {
    send_close(sender, reason).await;
    drain(sender, receiver).await;
}

/// Discards input until the connection ends, at most [`CLOSE_WAIT`], then drops it: a peer that
/// never reads must not keep the transport (and its buffers) alive after the close.
async fn drain(sender: &DeviceSender, receiver: &mut DeviceReceiver) {
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while !matches!(receiver.recv().await, Incoming::Ended(_)) {}
    })
    .await;
    sender.terminate();
}

impl Connection {
    /// §D6: an internal fault closes the connection `1011 internal_error` and is treated as
    /// socket loss (T10 for the session it holds, if any).
    async fn fault(&mut self) {
        tracing::error!(
            conn = self.id,
            "internal fault while handling a device connection; closing it 1011 internal_error"
        );
        send_close(&self.sender, CloseReason::InternalError).await;
        self.inner.connection_lost(self.id);
        drain(&self.sender, &mut self.receiver).await;
    }

    async fn close(&mut self, reason: CloseReason) {
        close_and_drain(&self.sender, &mut self.receiver, reason).await;
    }

    /// Answers a ping without letting a peer that never reads stall this task for long.
    async fn pong(&self, payload: Vec<u8>) {
        let _ = tokio::time::timeout(CLOSE_WAIT, self.sender.pong(payload)).await;
    }

    /// Until a valid claim or resume is acked (`Some(session_id)`) or the connection is done.
    /// The pre-claim slot is released as soon as the outcome is known, before any close wait.
    async fn pre_ack<G>(&mut self, deadline: Instant, guard: G) -> Option<String> {
        let mut guard = Some(guard);
        loop {
            let item = tokio::select! {
                biased;
                reason = stopped(&mut self.stop) => {
                    drop(guard.take());
                    self.close(reason).await;
                    return None;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    drop(guard.take());
                    self.close(CloseReason::PreClaimTimeout).await;
                    return None;
                }
                item = self.receiver.recv() => item,
            };
            if !matches!(
                item,
                Incoming::Message(WireMessage::Ping(_) | WireMessage::Pong(_))
            ) {
                // The first message decides the outcome (or the connection ended).
                drop(guard.take());
            }
            let rejected = match item {
                Incoming::Message(WireMessage::Text(text)) => {
                    let rng = match self.channel {
                        Channel::Sealed { rng } => Some(rng),
                        Channel::Plain | Channel::Cleartext => None,
                    };
                    // The plain route without a handshake (issue #23): a claim or resume here
                    // carried its token in the clear; only a link refusal belongs here.
                    let cleartext = self.channel == Channel::Cleartext;
                    let outcome = match decode_app_message(&text, Phase::PreAck) {
                        // A malformed refusal keeps its own reason on every route.
                        Err(rejection)
                            if cleartext && rejection.reason != CloseReason::InvalidRefusal =>
                        {
                            self.report(None, CloseReason::ExpectedSealedHandshake, &rejection);
                            Err(CloseReason::ExpectedSealedHandshake)
                        }
                        Ok(frame @ (AppFrame::SessionClaim(_) | AppFrame::SessionResume(_)))
                            if cleartext =>
                        {
                            SessionManager::from_inner(Arc::clone(&self.inner))
                                .refuse_cleartext(&frame);
                            Err(CloseReason::WrongTransport)
                        }
                        Err(rejection) => {
                            self.report(None, rejection.reason, &rejection);
                            Err(rejection.reason)
                        }
                        Ok(AppFrame::SessionClaim(claim)) => self
                            .inner
                            .claim(self.id, &self.sender, &claim, self.transport, rng)
                            .inspect_err(|&reason| {
                                if let Some((why, report)) = claim_refusal(reason, &claim) {
                                    self.inner.report_refusal(
                                        self.id,
                                        self.transport,
                                        None,
                                        reason,
                                        &why,
                                        report,
                                    );
                                }
                            }),
                        Ok(AppFrame::SessionResume(resume)) => self
                            .inner
                            .resume(self.id, &self.sender, &resume, self.transport, rng)
                            .inspect_err(|&reason| {
                                if let Some((why, report)) = resume_refusal(reason, &resume) {
                                    self.inner.report_refusal(
                                        self.id,
                                        self.transport,
                                        None,
                                        reason,
                                        &why,
                                        report,
                                    );
                                }
                            }),
                        // Issue #23: an app saying why it will not use a link. Either way the
                        // connection ends here (`refusal_recorded` or `invalid_refusal`).
                        Ok(AppFrame::LinkRefused(refusal)) => Err(self.inner.refuse(&refusal)),
                        Ok(_) if cleartext => Err(CloseReason::ExpectedSealedHandshake),
                        Ok(_) => Err(CloseReason::ExpectedClaimOrResume),
                    };
                    match outcome {
                        Ok(session_id) => return Some(session_id),
                        Err(reason) => reason,
                    }
                }
                Incoming::Message(WireMessage::Binary(_)) => {
                    let rejection = Rejection::binary_frame();
                    self.report(None, rejection.reason, &rejection);
                    rejection.reason
                }
                Incoming::TooBig { size } => {
                    self.report_refusal(None, CloseReason::MessageTooBig, &too_big(size));
                    CloseReason::MessageTooBig
                }
                Incoming::Message(WireMessage::Ping(payload)) => {
                    self.pong(payload).await;
                    continue;
                }
                Incoming::Message(WireMessage::Pong(_)) => continue,
                Incoming::Message(WireMessage::Close(..)) => {
                    drain(&self.sender, &mut self.receiver).await;
                    return None;
                }
                Incoming::Ended(_) => return None,
            };
            self.close(rejected).await;
            return None;
        }
    }

    /// The acked stage: frames, keepalive, and suspension when the socket goes (T10).
    async fn acked(&mut self, session_id: &str) {
        let period = self.inner.keepalive_interval();
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut awaiting_pong = false;
        let mut missed = 0u32;
        let mut unyielded = 0usize;
        // An app decides how many answers break a bound (even for calls that do not exist), so
        // their log lines are capped per connection: a claimed app cannot fill the disk.
        let mut bound_failures_logged = 0u32;
        loop {
            // The daemon shares one thread: after a burst of large frames (app events fanned out
            // to subscribers, big results), let the writers drain their queues before reading
            // on, so a subscriber that keeps reading is never cut for the daemon's own backlog.
            if unyielded >= YIELD_AFTER_BYTES {
                unyielded = 0;
                tokio::task::yield_now().await;
            }
            let item = tokio::select! {
                biased;
                reason = stopped(&mut self.stop) => {
                    self.close(reason).await;
                    return;
                }
                _ = ticker.tick() => {
                    if awaiting_pong {
                        missed += 1;
                        if missed >= MAX_MISSED_PONGS {
                            // No close frame: the peer is not answering anyway (§D6).
                            self.sender.terminate();
                            self.suspend(session_id, SuspendReason::ConnectionLost);
                            return;
                        }
                    }
                    if let Err(SendError::Closed) = self.sender.try_ping(Vec::new()) {
                        self.suspend(session_id, SuspendReason::ConnectionLost);
                        return;
                    }
                    awaiting_pong = true;
                    continue;
                }
                item = self.receiver.recv() => item,
            };
            let rejected = match item {
                Incoming::Message(WireMessage::Text(text)) => {
                    unyielded += text.len();
                    let phase = Phase::Acked { session_id };
                    match decode_app_message(&text, phase) {
                        Err(Rejection {
                            failed_call: Some(wire_id),
                            detail,
                            fault,
                            ..
                        }) => {
                            if bound_failures_logged < MAX_BOUND_FAILURES_LOGGED {
                                bound_failures_logged += 1;
                                tracing::warn!(
                                    %session_id, %wire_id, %detail,
                                    "failing a call whose answer breaks a bound"
                                );
                                if bound_failures_logged == MAX_BOUND_FAILURES_LOGGED {
                                    tracing::warn!(
                                        %session_id,
                                        "further answers that break a bound on this connection \
                                         are not logged"
                                    );
                                }
                            }
                            let fault = fault.unwrap_or(PartError::TooDeep);
                            self.inner
                                .fail_call(self.id, session_id, wire_id, detail, fault);
                            continue;
                        }
                        Ok(frame) => {
                            let frame_type = frame.type_name();
                            let field = registry_field(&frame);
                            match self.inner.apply(self.id, session_id, frame) {
                                Ok(()) => continue,
                                Err((reason, precise)) => {
                                    let why = precise.unwrap_or_else(|| {
                                        let why = FrameRefusal::message(Problem::Refused {
                                            why: "takes the session's registry past its limits \
                                                  (§D8.3)",
                                        });
                                        match field {
                                            Some(field) => FrameRefusal::field(field, why.problem),
                                            None => why,
                                        }
                                    });
                                    let why = why.of_frame(frame_type);
                                    self.report_refusal(Some(session_id), reason, &why);
                                    reason
                                }
                            }
                        }
                        Err(rejection) => {
                            self.report(Some(session_id), rejection.reason, &rejection);
                            rejection.reason
                        }
                    }
                }
                Incoming::Message(WireMessage::Binary(_)) => {
                    let rejection = Rejection::binary_frame();
                    self.report(Some(session_id), rejection.reason, &rejection);
                    rejection.reason
                }
                Incoming::TooBig { size } => {
                    self.report_refusal(
                        Some(session_id),
                        CloseReason::MessageTooBig,
                        &too_big(size),
                    );
                    CloseReason::MessageTooBig
                }
                Incoming::Message(WireMessage::Ping(payload)) => {
                    self.pong(payload).await;
                    continue;
                }
                Incoming::Message(WireMessage::Pong(_)) => {
                    awaiting_pong = false;
                    missed = 0;
                    continue;
                }
                Incoming::Message(WireMessage::Close(code, reason)) => {
                    let why = if code == Some(close::GOING_AWAY)
                        && reason == CloseReason::AppBackgrounded.reason()
                    {
                        SuspendReason::AppBackgrounded
                    } else {
                        SuspendReason::ConnectionLost
                    };
                    self.suspend(session_id, why);
                    drain(&self.sender, &mut self.receiver).await;
                    return;
                }
                Incoming::Ended(_) => {
                    self.suspend(session_id, SuspendReason::ConnectionLost);
                    return;
                }
            };
            // A daemon-side protocol close suspends the session like any socket loss.
            send_close(&self.sender, rejected).await;
            self.suspend(session_id, SuspendReason::ConnectionLost);
            drain(&self.sender, &mut self.receiver).await;
            return;
        }
    }

    fn suspend(&self, session_id: &str, reason: SuspendReason) {
        self.inner.suspend(self.id, session_id, reason);
    }

    /// Reports a decoder rejection closed with `close` (§D6.2). A malformed `link_refused` is
    /// not reported: the refusal flow of issue #23 has its own outcome (`invalid_refusal`).
    fn report(&self, session: Option<&str>, close: CloseReason, rejection: &Rejection) {
        if rejection.reason != CloseReason::InvalidRefusal {
            self.report_refusal(session, close, &rejection.refusal);
        }
    }

    fn report_refusal(&self, session: Option<&str>, close: CloseReason, why: &FrameRefusal) {
        self.inner.report_refusal(
            self.id,
            self.transport,
            session,
            close,
            why,
            Report::LogAndEvent,
        );
    }
}

/// The refusal of a message over the size limit.
fn too_big(bytes: usize) -> FrameRefusal {
    FrameRefusal::message(Problem::TooBig {
        bytes,
        max: appduct_protocol::limits::MAX_MESSAGE_BYTES,
    })
}

/// The registry field a registry frame changes (`tools`, `tool`, `events`, `event`).
fn registry_field(frame: &AppFrame) -> Option<&'static str> {
    match frame {
        AppFrame::ToolRegistrySnapshot(_) => Some("tools"),
        AppFrame::ToolRegistryDelta(_) => Some("tool"),
        AppFrame::EventRegistrySnapshot(_) => Some("events"),
        AppFrame::EventRegistryDelta(_) => Some("event"),
        _ => None,
    }
}
