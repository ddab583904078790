//! Refusals that teach (§D6.2, §D11, §C13.1): when the engine closes a device connection over
//! what the device sent, or refuses its claim or resume, it says which field was at fault and
//! why, in the daemon's log and as a `device_refused` event. The close itself is unchanged: its
//! code and reason token are appduct v2, and SDKs surface the token verbatim.
//!
//! Decoder refusals (§D6.2 steps 1 to 6) are logged and evented. A well-formed claim or resume
//! the engine refuses (§D9.3, §D9.4) is logged; it is evented only when its token is not in the
//! encoding the daemon issues, since then the close (`invalid_token`, `invalid_resume_token`)
//! points at the value when the mistake is the encoding. The other claim and resume closes name
//! their cause on their own (`unknown_session`, `link_expired`, …).
//!
//! Reports are rate-limited daemon-wide ([`REPORTS_PER_WINDOW`] per [`WINDOW`]), so a peer that
//! opens connection after connection cannot flood the log, the events log or subscribers; the
//! next report carries the count of those left out. A report never holds a field's value (no
//! token can leak), and its field and problem are cut to [`MAX_TEXT_BYTES`].

use std::time::Duration;

use appduct_protocol::close::CloseReason;
use appduct_protocol::control::{DeviceRefusedData, EventData, Transport};
use appduct_protocol::frames::{FrameRefusal, Problem, SessionClaim, SessionResume};
use appduct_protocol::ids::{ClaimToken, ResumeToken};
use tokio::time::Instant;

use super::Inner;

/// Refusals reported per [`WINDOW`], daemon-wide; the rest are counted.
pub const REPORTS_PER_WINDOW: u32 = 20;
/// The rate-limit window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Longest `field` and `problem` of a report, in bytes.
pub const MAX_TEXT_BYTES: usize = 256;

/// The daemon-wide budget of refusal reports: a fixed window.
#[derive(Debug, Default)]
pub(super) struct RefusalLimiter {
    window_start: Option<Instant>,
    reported: u32,
    suppressed: u64,
}

impl RefusalLimiter {
    /// `Some(refusals left out since the last report)` when this one may be reported (the
    /// count restarts), `None` when it is left out and counted.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .window_start
            .is_none_or(|start| now.duration_since(start) >= WINDOW)
        {
            self.window_start = Some(now);
            self.reported = 0;
        }
        if self.reported >= REPORTS_PER_WINDOW {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.reported += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// `s` cut to at most [`MAX_TEXT_BYTES`] on a character boundary, with `…` when cut.
fn bounded(s: &str) -> String {
    if s.len() <= MAX_TEXT_BYTES {
        return s.to_owned();
    }
    let mut end = MAX_TEXT_BYTES - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn refused(field: &str, why: &'static str) -> (FrameRefusal, Report) {
    (
        FrameRefusal::field(field, Problem::Refused { why }),
        Report::LogOnly,
    )
}

/// Whether a refusal becomes a `device_refused` event or stays in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Report {
    LogAndEvent,
    LogOnly,
}

/// A token in another encoding than the daemon's (the event-worthy claim and resume refusal).
fn bad_encoding(field: &str, allowed: &'static str) -> (FrameRefusal, Report) {
    (
        FrameRefusal::field(field, Problem::NotAllowed { allowed }),
        Report::LogAndEvent,
    )
}

/// Why a well-formed claim was refused (§D9.3), by the close the claim got; `None` for closes
/// that are not about what the app sent (shutdown, a failed write, an internal fault).
pub(super) fn claim_refusal(
    reason: CloseReason,
    claim: &SessionClaim,
) -> Option<(FrameRefusal, Report)> {
    let refusal = match reason {
        // Counted as a failed attempt either way; the encoding is the likely mistake.
        CloseReason::InvalidToken if ClaimToken::from_base64url(&claim.token).is_none() => {
            bad_encoding(
                "token",
                "the unpadded base64url of the link's 32 token bytes (43 characters)",
            )
        }
        CloseReason::InvalidToken => refused("token", "is not this link's claim token"),
        CloseReason::UnknownSession => refused("session_id", "names no pending link"),
        CloseReason::AlreadyClaimed => refused(
            "session_id",
            "names a session that is already claimed (resume it instead)",
        ),
        CloseReason::LinkExpired => refused("session_id", "names a link whose TTL has passed"),
        CloseReason::ClaimAttemptsExceeded => refused(
            "token",
            "failed too often: the link is discarded (create a new one)",
        ),
        CloseReason::WrongTransport => refused(
            "session_id",
            "names a link of the other listener (native links use wss, web links ws)",
        ),
        _ => return None,
    };
    Some((refusal.0.of_frame("session_claim"), refusal.1))
}

/// Why a well-formed resume was refused (§D9.4); `None` as for [`claim_refusal`].
pub(super) fn resume_refusal(
    reason: CloseReason,
    resume: &SessionResume,
) -> Option<(FrameRefusal, Report)> {
    let refusal = match reason {
        CloseReason::InvalidResumeToken
            if ResumeToken::from_base64url(&resume.resume_token).is_none() =>
        {
            bad_encoding(
                "resume_token",
                "the resume_token of the latest session_ack, unchanged",
            )
        }
        CloseReason::InvalidResumeToken => refused(
            "resume_token",
            "is not the session's latest resume token (each ack replaces it)",
        ),
        CloseReason::UnknownSession => refused(
            "session_id",
            "names no claimed session (a pending link is claimed, not resumed)",
        ),
        CloseReason::WrongTransport => {
            refused("session_id", "names a session of the other listener")
        }
        _ => return None,
    };
    Some((refusal.0.of_frame("session_resume"), refusal.1))
}

impl Inner {
    /// Reports one refusal (a log line, and a `device_refused` event unless `report` is
    /// [`Report::LogOnly`]) unless the rate limit is spent. `session` is the acked session of the connection, if any; before the ack the
    /// event has no `sessionId` (the peer's claim is not trusted). Takes the engine lock only
    /// to read the alias, and emits after releasing it.
    pub(super) fn report_refusal(
        &self,
        conn: u64,
        transport: Transport,
        session: Option<&str>,
        reason: CloseReason,
        refusal: &FrameRefusal,
        report: Report,
    ) {
        let suppressed = {
            let mut limiter = self
                .refusals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            limiter.admit(Instant::now())
        };
        let Some(suppressed) = suppressed else {
            return;
        };
        let field = refusal.field.as_deref().map(bounded);
        let problem = bounded(&refusal.problem.to_string());
        tracing::warn!(
            conn,
            %transport,
            session = session.unwrap_or("-"),
            code = reason.code(),
            reason = reason.reason(),
            frame_type = refusal.frame_type.unwrap_or("-"),
            field = field.as_deref().unwrap_or("-"),
            %problem,
            suppressed,
            "refused a device message: {}",
            refusal_line(refusal.frame_type, field.as_deref(), &problem),
        );
        if report == Report::LogOnly {
            return;
        }
        let alias = session.and_then(|id| self.state().sessions.get(id).map(|s| s.alias.clone()));
        let data = DeviceRefusedData::new(transport, reason.code(), reason.reason(), problem)
            .with_frame_type(refusal.frame_type.map(str::to_owned))
            .with_field(field)
            .with_suppressed(suppressed);
        self.bus
            .emit(session, alias.as_deref(), EventData::DeviceRefused(data));
    }
}

/// `session_claim: field `token`: must be …`, as the log and `appduct events tail` say it.
fn refusal_line(frame_type: Option<&str>, field: Option<&str>, problem: &str) -> String {
    let mut line = String::new();
    if let Some(t) = frame_type {
        line.push_str(t);
        line.push_str(": ");
    }
    if let Some(f) = field {
        line.push_str("field `");
        line.push_str(f);
        line.push_str("`: ");
    }
    line.push_str(problem);
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_reports_a_window_then_counts_what_it_left_out() {
        let mut l = RefusalLimiter::default();
        let t0 = Instant::now();
        for _ in 0..REPORTS_PER_WINDOW {
            assert_eq!(l.admit(t0), Some(0));
        }
        assert_eq!(l.admit(t0), None);
        assert_eq!(l.admit(t0 + WINDOW / 2), None);
        assert_eq!(l.admit(t0 + WINDOW), Some(2));
        assert_eq!(l.admit(t0 + WINDOW), Some(0));
    }

    #[test]
    fn texts_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_TEXT_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_TEXT_BYTES && cut.ends_with('…'), "{cut}");
        assert_eq!(bounded("token"), "token");
    }
}
