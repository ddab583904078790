//! The cancellation token a tool handler gets (§T5.1 `signal`): fired once, with a reason.

use std::sync::Arc;

use tokio::sync::watch;

/// Fires at most once, carrying the abort reason: a `tool_cancel` reason, `timeout`,
/// `session_suspended` or `closed`. Cancellation is cooperative: the handler keeps running
/// until it returns, but nothing it returns is sent after the token fired.
#[derive(Debug, Clone)]
pub struct CancellationToken {
    reason: Arc<watch::Sender<Option<String>>>,
}

impl Default for CancellationToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancellationToken {
    pub fn new() -> Self {
        Self {
            reason: Arc::new(watch::Sender::new(None)),
        }
    }

    /// Fires the token. Only the first reason counts; returns whether this call fired it.
    pub fn cancel(&self, reason: impl Into<String>) -> bool {
        let reason = reason.into();
        self.reason.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(reason);
            true
        })
    }

    pub fn is_cancelled(&self) -> bool {
        self.reason.borrow().is_some()
    }

    /// The reason, once fired.
    pub fn reason(&self) -> Option<String> {
        self.reason.borrow().clone()
    }

    /// Resolves with the reason once the token fires (at once if it already has).
    pub async fn cancelled(&self) -> String {
        let mut rx = self.reason.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            // The sender lives in `self`, so the channel cannot close while we wait.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_reason_wins_and_waiters_see_it() {
        let token = CancellationToken::new();
        assert!(!token.is_cancelled());
        let waiter = tokio::spawn({
            let token = token.clone();
            async move { token.cancelled().await }
        });
        assert!(token.cancel("client_cancelled"));
        assert!(!token.cancel("timeout"));
        assert_eq!(waiter.await.unwrap(), "client_cancelled");
        assert_eq!(token.reason().as_deref(), Some("client_cancelled"));
        assert_eq!(token.cancelled().await, "client_cancelled");
    }
}
