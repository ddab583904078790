//! The loop both wait built-ins run (§M8.2, §M8.8) on their own connection's
//! `events.subscribe` stream: heartbeats (§M11.3), the timeout, the cancel, and a failure
//! within a second when that connection closes.

use std::time::Duration;

use appduct_client::client::EventStream;
use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::json;
use tokio::time::Instant;

use crate::context::BridgeContext;
use crate::error::ToolFailure;
use crate::progress::Progress;

/// What an event means to a wait.
pub enum Step<T> {
    Done(Result<T, ToolFailure>),
    Continue,
}

/// Runs a wait loop: `on_event` decides per event; timeout, cancel, a closed connection and
/// heartbeats are handled here.
#[allow(clippy::too_many_arguments)]
pub async fn wait_loop<T>(
    bridge: &BridgeContext,
    context: &RequestContext<RoleServer>,
    stream: &mut EventStream,
    timeout_ms: u64,
    what: &str,
    closed: impl Fn() -> ToolFailure,
    timed_out: impl Fn() -> ToolFailure,
    on_event: impl FnMut(appduct_protocol::control::EventNotification) -> Step<T>,
) -> Result<T, ToolFailure> {
    let mut waiter = Waiter::new(bridge, context, timeout_ms);
    let deadline = waiter.deadline();
    waiter
        .run(stream, deadline, what, closed, timed_out, on_event)
        .await
}

/// One wait request's clock and heartbeats, across several phases (a claim, then a registry):
/// progress values keep increasing from one phase to the next.
pub struct Waiter<'a> {
    bridge: &'a BridgeContext,
    context: &'a RequestContext<RoleServer>,
    progress: Option<Progress>,
    started: Instant,
    timeout_ms: u64,
    next_beat: Instant,
}

impl<'a> Waiter<'a> {
    pub fn new(
        bridge: &'a BridgeContext,
        context: &'a RequestContext<RoleServer>,
        timeout_ms: u64,
    ) -> Self {
        let started = Instant::now();
        Self {
            bridge,
            context,
            progress: Progress::for_request(context),
            started,
            timeout_ms,
            next_beat: started + bridge.options.heartbeat_interval,
        }
    }

    /// The request's deadline: `timeoutMs` after it started.
    pub fn deadline(&self) -> Instant {
        self.started + Duration::from_millis(self.timeout_ms)
    }

    /// Waits until `on_event` is done, or `until` passes (`timed_out`), the request is
    /// cancelled, or the connection closes (`closed`).
    pub async fn run<T>(
        &mut self,
        stream: &mut EventStream,
        until: Instant,
        what: &str,
        closed: impl Fn() -> ToolFailure,
        timed_out: impl Fn() -> ToolFailure,
        mut on_event: impl FnMut(appduct_protocol::control::EventNotification) -> Step<T>,
    ) -> Result<T, ToolFailure> {
        let beat = self.bridge.options.heartbeat_interval;
        loop {
            tokio::select! {
                biased;
                () = self.context.ct.cancelled() => {
                    return Err(ToolFailure::new(ErrorType::ToolCancelled, format!("the wait for {what} was cancelled")));
                }
                event = stream.next() => match event {
                    Some(e) => match on_event(e) {
                        Step::Done(r) => return r,
                        Step::Continue => {}
                    },
                    None => return Err(closed()),
                },
                () = tokio::time::sleep_until(until) => return Err(timed_out()),
                () = tokio::time::sleep_until(self.next_beat), if self.progress.is_some() => {
                    self.next_beat += beat;
                    if let Some(p) = self.progress.as_mut() {
                        let elapsed = self.started.elapsed().as_millis() as f64;
                        p.report_with_total(elapsed, self.timeout_ms as f64, format!("waiting for {what}")).await;
                    }
                }
            }
        }
    }
}

pub fn timeout_failure(what: &str, timeout_ms: u64) -> ToolFailure {
    ToolFailure::new(
        ErrorType::ToolTimeout,
        format!("{what} did not happen within {timeout_ms} ms"),
    )
    .with_details(json!({"timeoutMs": timeout_ms}))
}
