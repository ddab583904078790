//! MCP progress for one request (§M11): only with the client's token, echoed exactly;
//! strictly increasing values; at most one notification per 100 ms, keeping the newest report
//! of a window and flushing it before the response; nothing after a cancel.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Minimum spacing of two notifications for one token.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The smallest step that keeps values strictly increasing.
const STEP: f64 = 0.000_001;

#[derive(Debug, Clone, PartialEq)]
struct Report {
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

/// The progress channel of one MCP request.
#[derive(Debug)]
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    ct: CancellationToken,
    last: Option<f64>,
    last_sent_at: Option<Instant>,
    pending: Option<Report>,
}

impl Progress {
    /// `None` when the request carries no `progressToken`: the bridge never invents one.
    pub fn for_request(context: &RequestContext<RoleServer>) -> Option<Self> {
        let token = context.meta.get_progress_token()?;
        Some(Self {
            peer: context.peer.clone(),
            token,
            ct: context.ct.clone(),
            last: None,
            last_sent_at: None,
            pending: None,
        })
    }

    /// An app report: `p` (0 when absent) is forwarded as `max(p, last + 0.000001)`.
    pub async fn report(&mut self, p: Option<f64>, message: Option<String>) {
        self.submit(Report {
            progress: p.unwrap_or(0.0),
            total: None,
            message,
        })
        .await;
    }

    /// A heartbeat with an explicit value and total (the wait built-ins).
    pub async fn report_with_total(&mut self, progress: f64, total: f64, message: String) {
        self.submit(Report {
            progress,
            total: Some(total),
            message: Some(message),
        })
        .await;
    }

    async fn submit(&mut self, report: Report) {
        let due = self
            .last_sent_at
            .is_none_or(|at| at.elapsed() >= MIN_INTERVAL);
        if due {
            self.pending = None;
            self.send(report).await;
        } else {
            // Within the window only the newest report is kept.
            self.pending = Some(report);
        }
    }

    /// When a buffered report becomes due, if one is waiting.
    pub fn flush_at(&self) -> Option<Instant> {
        self.pending.as_ref()?;
        Some(
            self.last_sent_at
                .map_or_else(Instant::now, |at| at + MIN_INTERVAL),
        )
    }

    /// Sends a buffered report now (before the response, or when its window ended).
    pub async fn flush(&mut self) {
        if let Some(report) = self.pending.take() {
            self.send(report).await;
        }
    }

    async fn send(&mut self, report: Report) {
        if self.ct.is_cancelled() {
            return;
        }
        let value = match self.last {
            Some(last) => report.progress.max(last + STEP),
            None => report.progress,
        };
        self.last = Some(value);
        self.last_sent_at = Some(Instant::now());
        let mut param = ProgressNotificationParam::new(self.token.clone(), value);
        param.total = report.total;
        param.message = report.message;
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!("cannot send progress: {e}");
        }
    }
}

/// Sleeps until `at`, or forever when there is nothing to flush (for `select!`).
pub async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
