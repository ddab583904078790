//! The engine's state transitions under its lock (§D9.3, §D9.4, §D6.2 step 7, T6, T8, T10,
//! T16): claim, resume, applying frames, suspension, and the link and grace timers' effects.

use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use appduct_protocol::close::CloseReason;
use appduct_protocol::control::{
    Device, EventData, EventsChangedData, LinkRefusedData, RegistryState, RngSource,
    SessionClaimedData, SessionResumedData, SessionSuspendedData, SuspendReason, ToolsChangedData,
    Transport,
};
use appduct_protocol::frames::{
    AppFrame, DaemonFrame, EventDelta, FrameRefusal, LinkRefused, Problem, SessionAck,
    SessionClaim, SessionResume, ToolDelta, ToolRegistryDelta,
};
use appduct_protocol::ids::ResumeToken;
use appduct_protocol::limits::{MAX_REGISTRY_BYTES, TOKEN_BYTES};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use appduct_protocol::parts::PartError;

use super::registry::{Registry, RegistryFull};
use super::{
    CallFrame, CallRouter, CallsEnded, ConnCtl, EngineOptions, Inner, Session, Socket, State, alias,
};
use crate::device_socket::DeviceSender;
use crate::links::{ClaimCheck, RefusalCheck, random_bytes};

fn ack_text(session_id: &str, alias: &str, token: &ResumeToken, options: &EngineOptions) -> String {
    DaemonFrame::SessionAck(
        SessionAck::new(
            session_id.to_owned(),
            alias.to_owned(),
            token.to_base64url(),
            u64::from(options.keepalive_interval_s),
            u64::from(options.grace_s),
        )
        .with_event_registry(true)
        // Issue #17 (§D17): content results and result parts, on every ack.
        .with_result_content(true)
        .with_result_parts_max_bytes(options.result_max_bytes),
    )
    .encode()
}

/// The close for a registry frame that would take the session past [`MAX_REGISTRY_BYTES`]; the
/// close reason is the protocol's `invalid_registry`, the log names the cap.
fn registry_too_large(session_id: &str) -> CloseReason {
    tracing::warn!(
        %session_id,
        limit = MAX_REGISTRY_BYTES,
        "refusing a registry frame: the session's tools and events would pass MAX_REGISTRY_BYTES"
    );
    CloseReason::InvalidRegistry
}

fn registry_refused(session_id: &str, full: RegistryFull) -> CloseReason {
    match full {
        RegistryFull::Bytes => registry_too_large(session_id),
        RegistryFull::Entries => CloseReason::InvalidRegistry,
    }
}

impl Inner {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The declaration fields `registry.require` asks of each tool (§D18.5), as last set.
    pub(super) fn registry_require(&self) -> Vec<&'static str> {
        self.registry_require
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn router(&self) -> Option<Arc<dyn CallRouter>> {
        self.router
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn calls_ended(&self, session_id: &str, why: CallsEnded) {
        if let Some(router) = self.router() {
            router.on_session_ended_calls(session_id, why);
        }
    }

    pub(super) fn keepalive_interval(&self) -> Duration {
        Duration::from_secs(u64::from(self.options.keepalive_interval_s.max(1)))
    }

    pub(super) fn grace(&self) -> Duration {
        Duration::from_secs(u64::from(self.options.grace_s))
    }

    /// A connection's id and stop signal; `None` once shutdown has begun.
    pub(super) fn register_connection(
        &self,
        sender: &DeviceSender,
    ) -> Option<(u64, watch::Receiver<Option<CloseReason>>)> {
        let mut st = self.state();
        if st.shutting_down {
            return None;
        }
        let id = st.next_id();
        let (stop, stop_rx) = watch::channel(None);
        st.conns.insert(
            id,
            ConnCtl {
                stop,
                sender: sender.clone(),
            },
        );
        Some((id, stop_rx))
    }

    pub(super) fn unregister_connection(&self, id: u64) {
        self.state().conns.remove(&id);
        self.conn_ended.notify_waiters();
    }

    /// The claim algorithm (§D9.3). On success the ack is queued, the session is live and
    /// `session_claimed` is emitted; the session id is returned.
    pub(super) fn claim(
        &self,
        conn: u64,
        sender: &DeviceSender,
        claim: &SessionClaim,
        transport: Transport,
        rng: Option<RngSource>,
    ) -> Result<String, CloseReason> {
        let token = ResumeToken::from_bytes(
            random_bytes::<TOKEN_BYTES>().map_err(|_| CloseReason::InternalError)?,
        );
        let now = self.clock.now_unix_ms();
        let id = claim.session_id.as_str();
        let mut st = self.state();
        if st.shutting_down {
            return Err(CloseReason::DaemonShutdown);
        }
        match st
            .links
            .check_claim(id, transport, &claim.token, now / 1000)
        {
            ClaimCheck::Valid => {}
            ClaimCheck::Expired => {
                // T6 by the wall clock, before the (monotonic) TTL timer fired.
                self.bus
                    .emit(Some(id), None, EventData::LinkExpired(Default::default()));
                return Err(CloseReason::LinkExpired);
            }
            ClaimCheck::NotFound if st.sessions.contains_key(id) => {
                return Err(CloseReason::AlreadyClaimed);
            }
            ClaimCheck::NotFound => return Err(CloseReason::UnknownSession),
            ClaimCheck::Tombstone => return Err(CloseReason::LinkExpired),
            ClaimCheck::WrongTransport => return Err(CloseReason::WrongTransport),
            ClaimCheck::InvalidToken => return Err(CloseReason::InvalidToken),
            ClaimCheck::Burned => return Err(CloseReason::ClaimAttemptsExceeded),
        }
        let alias = alias::assign(
            claim.device.model.as_deref(),
            st.sessions.values().map(|s| s.alias.as_str()),
        );
        // Queued before the session becomes visible, so no tool_call can overtake the ack. A
        // socket that cannot take it is gone; the link then stays claimable.
        sender
            .try_send_text(ack_text(id, &alias, &token, &self.options))
            .map_err(|_| CloseReason::SendFailed)?;
        let Some(link) = st.links.take(id) else {
            return Err(CloseReason::UnknownSession);
        };
        let device = Device::default()
            .with_manufacturer(claim.device.manufacturer.clone())
            .with_model(claim.device.model.clone())
            .with_os(claim.device.os.clone());
        st.sessions.insert(
            id.to_owned(),
            Session {
                alias: alias.clone(),
                transport,
                device: device.clone(),
                created_at_ms: link.created_at_ms,
                claimed_at_ms: now,
                resume_token: token,
                rng,
                socket: Socket::Attached {
                    conn,
                    sender: sender.clone(),
                },
                tools: Registry::default(),
                events: Registry::default(),
                registry: RegistryState::Pending,
            },
        );
        self.bus.open_session(id);
        self.bus.emit(
            Some(id),
            Some(&alias),
            EventData::SessionClaimed(SessionClaimedData::new(device, transport)),
        );
        Ok(id.to_owned())
    }

    /// A `link_refused` first frame (issue #23): a valid proof for a pending link records the
    /// first refusal (emitting `link_refused`) and is answered `1000 refusal_recorded`; anything
    /// else is `1008 invalid_refusal` with no effect. Never a failed claim.
    pub(super) fn refuse(&self, refusal: &LinkRefused) -> CloseReason {
        let id = refusal.session_id.as_str();
        let mut st = self.state();
        if st.shutting_down {
            return CloseReason::DaemonShutdown;
        }
        match st.links.check_refusal(id, refusal.reason, &refusal.proof) {
            RefusalCheck::Recorded => {
                self.bus.emit(
                    Some(id),
                    None,
                    EventData::LinkRefused(LinkRefusedData::new(refusal.reason)),
                );
                CloseReason::RefusalRecorded
            }
            RefusalCheck::AlreadyRecorded => CloseReason::RefusalRecorded,
            RefusalCheck::Invalid => CloseReason::InvalidRefusal,
        }
    }

    /// The resume algorithm (§D9.4): T11 or T12, or a close for T13/T14/unknown ids.
    pub(super) fn resume(
        &self,
        conn: u64,
        sender: &DeviceSender,
        resume: &SessionResume,
        transport: Transport,
        rng: Option<RngSource>,
    ) -> Result<String, CloseReason> {
        let token = ResumeToken::from_bytes(
            random_bytes::<TOKEN_BYTES>().map_err(|_| CloseReason::InternalError)?,
        );
        let id = resume.session_id.as_str();
        let mut st = self.state();
        if st.shutting_down {
            return Err(CloseReason::DaemonShutdown);
        }
        let Some(session) = st.sessions.get_mut(id) else {
            // A pending link, an unknown or a forgotten id (project decision for pending).
            return Err(CloseReason::UnknownSession);
        };
        if session.transport != transport {
            return Err(CloseReason::WrongTransport);
        }
        if !session.resume_token.matches(&resume.resume_token) {
            return Err(CloseReason::InvalidResumeToken);
        }
        sender
            .try_send_text(ack_text(id, &session.alias, &token, &self.options))
            .map_err(|_| CloseReason::SendFailed)?;
        // The previous token stops working the moment the new one is issued.
        session.resume_token = token;
        session.rng = rng;
        let previous = std::mem::replace(
            &mut session.socket,
            Socket::Attached {
                conn,
                sender: sender.clone(),
            },
        );
        let alias = session.alias.clone();
        let replaced = match previous {
            Socket::Attached { conn: old, .. } => {
                st.stop_connection(old, CloseReason::SessionReplaced);
                true
            }
            Socket::Suspended { grace, .. } => {
                grace.abort();
                false
            }
        };
        self.bus.open_session(id);
        self.bus.emit(
            Some(id),
            Some(&alias),
            EventData::SessionResumed(SessionResumedData::new(replaced)),
        );
        if replaced {
            self.calls_ended(id, CallsEnded::Replaced);
        }
        Ok(id.to_owned())
    }

    /// Step 7 of §D6.2 for a frame from connection `conn`. Frames from a connection that no
    /// longer holds the session are dropped, before any check. `Err` is the close to send, with
    /// the refusal to report when it is more precise than "past the registry limits".
    pub(super) fn apply(
        &self,
        conn: u64,
        session_id: &str,
        frame: AppFrame,
    ) -> Result<(), (CloseReason, Option<FrameRefusal>)> {
        // Read before the state lock, which is never held while taking it.
        let require = self.registry_require();
        let mut st = self.state();
        let State {
            sessions,
            shared_tools,
            ..
        } = &mut *st;
        let Some(session) = sessions.get_mut(session_id) else {
            return Ok(());
        };
        if !session.is_attached(conn) {
            return Ok(());
        }
        // §D18.5: a tool lacking a declaration `registry.require` asks for refuses the frame
        // like any invalid descriptor (`invalid_registry`, the registry unchanged). Only for
        // the connection holding the session: a stale connection's frame was dropped above.
        if let Some((path, tool, field)) = undeclared(&require, &frame) {
            tracing::warn!(%session_id, %tool, field, "refusing a registry frame: registry.require");
            return Err((
                CloseReason::InvalidRegistry,
                Some(FrameRefusal::field(
                    path,
                    Problem::Undeclared { tool, field },
                )),
            ));
        }
        let alias = Some(session.alias.as_str());
        // The other kind's bytes leave this much for the registry a frame changes.
        let tools_budget = MAX_REGISTRY_BYTES.saturating_sub(session.events.bytes());
        let events_budget = MAX_REGISTRY_BYTES.saturating_sub(session.tools.bytes());
        match frame {
            AppFrame::ToolRegistrySnapshot(snapshot) => {
                let bytes: usize = snapshot.tools.iter().map(|t| t.held_bytes()).sum();
                if bytes > tools_budget {
                    return Err((registry_too_large(session_id), None));
                }
                session.tools = Registry::from_snapshot(
                    snapshot.tools.into_iter().map(|t| shared_tools.share(t)),
                );
                // Before the event, so a describe answered after `tools_changed` sees it.
                session.registry = RegistryState::Received;
                self.tools_changed(session_id, session);
            }
            AppFrame::ToolRegistryDelta(delta) => {
                match delta.change {
                    ToolDelta::Upsert(tool) => session
                        .tools
                        .upsert(shared_tools.share(tool), tools_budget)
                        .map_err(|full| (registry_refused(session_id, full), None))?,
                    ToolDelta::Remove { name } => session.tools.remove(&name),
                }
                self.tools_changed(session_id, session);
            }
            AppFrame::EventRegistrySnapshot(snapshot) => {
                let bytes: usize = snapshot.events.iter().map(|e| e.held_bytes()).sum();
                if bytes > events_budget {
                    return Err((registry_too_large(session_id), None));
                }
                session.events = Registry::from_snapshot(snapshot.events);
                self.events_changed(session_id, session);
            }
            AppFrame::EventRegistryDelta(delta) => {
                match delta.change {
                    EventDelta::Upsert(event) => session
                        .events
                        .upsert(event, events_budget)
                        .map_err(|full| (registry_refused(session_id, full), None))?,
                    EventDelta::Remove { name } => session.events.remove(&name),
                }
                self.events_changed(session_id, session);
            }
            AppFrame::ToolResult(f) => self.call_frame(session_id, CallFrame::Result(f)),
            AppFrame::ToolResultPart(f) => self.call_frame(session_id, CallFrame::Part(f)),
            AppFrame::ToolError(f) => self.call_frame(session_id, CallFrame::Error(f)),
            AppFrame::ToolCallProgress(f) => self.call_frame(session_id, CallFrame::Progress(f)),
            AppFrame::Event(event) => {
                // Names and payloads are never checked against declarations (§D6.2).
                self.bus.emit_app_event(
                    session_id,
                    alias,
                    event.name,
                    event.payload.unwrap_or(Value::Null),
                    event.ts,
                );
            }
            // The acked decoder never yields these; treat them as the type error they are.
            AppFrame::SessionClaim(_) | AppFrame::SessionResume(_) | AppFrame::LinkRefused(_) => {
                return Err((CloseReason::UnknownMessageType, None));
            }
        }
        Ok(())
    }

    /// An answer from connection `conn` for call `wire_id` that broke a per-value bound: that
    /// call fails, the connection stays. Dropped like any frame once `conn` lost the session.
    pub(super) fn fail_call(
        &self,
        conn: u64,
        session_id: &str,
        wire_id: String,
        detail: String,
        fault: PartError,
    ) {
        // Held while routing, as `apply` does, so the call cannot race a transition.
        let st = self.state();
        if st
            .sessions
            .get(session_id)
            .is_some_and(|s| s.is_attached(conn))
        {
            self.call_frame(
                session_id,
                CallFrame::Invalid {
                    id: wire_id,
                    detail,
                    fault,
                },
            );
        }
        drop(st);
    }

    pub(super) fn tools_changed(&self, id: &str, session: &Session) {
        self.bus.emit(
            Some(id),
            Some(&session.alias),
            EventData::ToolsChanged(ToolsChangedData::new(session.tools.len() as u64)),
        );
    }

    pub(super) fn events_changed(&self, id: &str, session: &Session) {
        self.bus.emit(
            Some(id),
            Some(&session.alias),
            EventData::EventsChanged(EventsChangedData::new(session.events.len() as u64)),
        );
    }

    pub(super) fn call_frame(&self, session_id: &str, frame: CallFrame) {
        if let Some(router) = self.router() {
            router.on_call_frame(session_id, frame);
        }
    }

    /// T10: the socket of `conn` is gone. A no-op when the connection no longer holds the
    /// session (replaced, revoked, shut down).
    pub(super) fn suspend(&self, conn: u64, session_id: &str, reason: SuspendReason) {
        let now = self.clock.now_unix_ms();
        let mut st = self.state();
        if st.shutting_down {
            return;
        }
        let epoch = st.next_id();
        let Some(session) = st.sessions.get_mut(session_id) else {
            return;
        };
        if !session.is_attached(conn) {
            return;
        }
        let grace = self.spawn_grace_timer(session_id, epoch);
        session.socket = Socket::Suspended {
            since_ms: now,
            reason,
            epoch,
            grace,
        };
        let alias = session.alias.clone();
        self.bus.emit(
            Some(session_id),
            Some(&alias),
            EventData::SessionSuspended(SessionSuspendedData::new(reason)),
        );
        self.calls_ended(session_id, CallsEnded::Suspended(reason));
    }

    /// T10 for whichever session connection `conn` holds, when its handling failed midway (the
    /// session may have been attached before the fault, with the id never handed back).
    pub(super) fn connection_lost(&self, conn: u64) {
        let attached = {
            let st = self.state();
            st.sessions
                .iter()
                .find(|(_, s)| s.is_attached(conn))
                .map(|(id, _)| id.clone())
        };
        if let Some(session_id) = attached {
            self.suspend(conn, &session_id, SuspendReason::ConnectionLost);
        }
    }

    pub(super) fn spawn_grace_timer(&self, session_id: &str, epoch: u64) -> AbortHandle {
        let weak = self.this.clone();
        let id = session_id.to_owned();
        let grace = self.grace();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let Some(inner) = weak.upgrade() {
                inner.expire(&id, epoch);
            }
        })
        .abort_handle()
    }

    /// T16: the grace window of suspension `epoch` elapsed.
    pub(super) fn expire(&self, session_id: &str, epoch: u64) {
        let mut st = self.state();
        let current = matches!(
            st.sessions.get(session_id).map(|s| &s.socket),
            Some(Socket::Suspended { epoch: e, .. }) if *e == epoch
        );
        if !current {
            return;
        }
        let Some(session) = st.sessions.remove(session_id) else {
            return;
        };
        self.bus.emit(
            Some(session_id),
            Some(&session.alias),
            EventData::SessionExpired(Default::default()),
        );
        self.bus.close_session(session_id);
        self.calls_ended(session_id, CallsEnded::Expired);
    }

    /// T6: the link's TTL elapsed. `true` when the id is now a tombstone whose window the timer
    /// runs next (it may already have expired by the wall clock at a claim).
    pub(super) fn expire_link(&self, id: &str) -> bool {
        let mut st = self.state();
        if !st.links.expire(id) {
            return st.links.is_tombstone(id);
        }
        self.bus
            .emit(Some(id), None, EventData::LinkExpired(Default::default()));
        true
    }

    /// T8: the tombstone window elapsed.
    pub(super) fn forget_link(&self, id: &str) {
        self.state().links.forget(id);
    }

    pub(super) fn is_id_taken(&self, id: &str) -> bool {
        let st = self.state();
        st.links.knows(id) || st.sessions.contains_key(id)
    }
}

/// The first tool of a registry frame lacking a declaration `require` names (§D18.5): the
/// refusal's path, the tool and the field.
fn undeclared(
    require: &[&'static str],
    frame: &AppFrame,
) -> Option<(String, String, &'static str)> {
    if require.is_empty() {
        return None;
    }
    match frame {
        AppFrame::ToolRegistrySnapshot(snapshot) => {
            snapshot.tools.iter().enumerate().find_map(|(i, t)| {
                t.missing_declaration(require)
                    .map(|field| (format!("tools[{i}].{field}"), t.name.clone(), field))
            })
        }
        AppFrame::ToolRegistryDelta(ToolRegistryDelta {
            change: ToolDelta::Upsert(t),
            ..
        }) => t
            .missing_declaration(require)
            .map(|field| (format!("tool.{field}"), t.name.clone(), field)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::clock::ManualClock;
    use crate::events::EventBus;
    use crate::links::StaticLinkEnv;
    use crate::sessions::SessionManager;
    use appduct_protocol::frames::{Phase, decode_app_message};

    /// §D18.5 after the attachment check: a registry frame for a session its connection no
    /// longer holds (here: a session that is gone) is dropped, never refused as undeclared.
    #[tokio::test]
    async fn a_stale_connections_registry_frame_is_dropped_before_the_guard() {
        let clock = Arc::new(ManualClock::new(1_000));
        let mgr = SessionManager::new(
            EngineOptions::default(),
            EventBus::new(clock.clone(), 16),
            clock,
            Arc::new(StaticLinkEnv::default()),
        );
        mgr.set_registry_require(vec!["testCases"]);
        let sid = "q3VfZ0xkR2ptTnB4";
        let text = serde_json::json!({"type": "tool_registry_delta", "session_id": sid,
            "operation": "upsert", "tool": {"name": "bare", "description": "No test cases."}})
        .to_string();
        let frame = decode_app_message(&text, Phase::Acked { session_id: sid }).unwrap();
        assert!(
            undeclared(&["testCases"], &frame).is_some(),
            "the guard would refuse it"
        );
        assert!(mgr.inner.apply(7, sid, frame).is_ok());
    }
}
