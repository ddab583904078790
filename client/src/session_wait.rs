//! What the waits for a session share (issue #23): `appduct sessions link --wait` and the MCP
//! bridge's `appduct_wait_for_session`. Each frontend runs its own loop (the bridge adds
//! heartbeats and cancellation); the facts they read and the words they report come from here,
//! so both say the same thing:
//!
//! - a pending link as `sessions.describe` describes it ([`PendingLink`]), including the app's
//!   recorded refusal;
//! - the typed error for a refused link ([`refusal_failure`]) and the hint of a wait that timed
//!   out on a link nobody claimed ([`unclaimed_hint`]), by link kind;
//! - how long a claimed session's registry is waited for ([`registry_deadline`]).

use std::time::Duration;

use appduct_protocol::errors::ErrorType;
use appduct_protocol::link::RefusalReason;
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long a wait goes on after the claim for the app's registry, at least: a claim just
/// before the deadline still gets this long for its first snapshot before the wait returns
/// `registry: "pending"`.
pub const REGISTRY_GRACE: Duration = Duration::from_secs(2);

/// Until when a wait whose session was claimed at `claimed_at` waits for its registry: the
/// wait's own deadline, or [`REGISTRY_GRACE`] after the claim if that is later.
pub fn registry_deadline(claimed_at: Instant, deadline: Instant) -> Instant {
    deadline.max(claimed_at + REGISTRY_GRACE)
}

/// Who reports: the hints name the CLI's flags or the bridge's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    Cli,
    Mcp,
}

impl Frontend {
    /// How a person asks for a link of this kind.
    fn mint_for(self, kind: &str) -> String {
        match self {
            Frontend::Cli => format!("appduct sessions link --for {kind}"),
            Frontend::Mcp => format!("appduct_connect with \"for\": \"{kind}\""),
        }
    }
}

/// A link minted and not claimed yet, from the `unknown_session` details of
/// `sessions.describe` (`pending: true`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingLink {
    /// The wire transport (`native`, `web`, `sealed`, …), when the daemon reports it.
    pub transport: Option<String>,
    pub address: Option<String>,
    pub port: Option<u16>,
    /// The first refusal an app sent for it.
    pub refused: Option<RefusalReason>,
}

impl PendingLink {
    /// The pending link these details describe; `None` unless `pending` is `true`.
    pub fn from_details(details: Option<&Value>) -> Option<Self> {
        let d = details?;
        if d.get("pending").and_then(Value::as_bool) != Some(true) {
            return None;
        }
        let endpoint = d.get("endpoint");
        Some(Self {
            transport: d
                .get("transport")
                .and_then(Value::as_str)
                .map(str::to_owned),
            address: endpoint
                .and_then(|e| e.get("address"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            port: endpoint
                .and_then(|e| e.get("port"))
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok()),
            refused: d
                .get("refused")
                .and_then(Value::as_str)
                .and_then(RefusalReason::parse),
        })
    }

    /// `<address>:<port>` (IPv6 in brackets), when both are known.
    fn endpoint(&self) -> Option<String> {
        let (address, port) = (self.address.as_deref()?, self.port?);
        Some(if address.contains(':') {
            format!("[{address}]:{port}")
        } else {
            format!("{address}:{port}")
        })
    }
}

/// The typed failure of a wait that learnt the app refused the link: `unknown_session` (as for
/// a link that expired or was revoked before a claim: the session will not come from this link),
/// with `details: {selector, refused, hint}`.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitFailure {
    pub error_type: ErrorType,
    pub message: String,
    pub details: Value,
}

/// The app refused the link of `session_id` for `reason`.
pub fn refusal_failure(
    session_id: &str,
    reason: RefusalReason,
    link: Option<&PendingLink>,
    frontend: Frontend,
) -> WaitFailure {
    WaitFailure {
        error_type: ErrorType::UnknownSession,
        message: format!(
            "The app refused the link for session {session_id} ({reason}): {}",
            refusal_cause(reason)
        ),
        details: json!({
            "selector": session_id,
            "refused": reason.as_str(),
            "hint": refusal_hint(reason, link, frontend),
        }),
    }
}

fn refusal_cause(reason: RefusalReason) -> &'static str {
    match reason {
        RefusalReason::UnsupportedLink => "it cannot use this kind of link",
        RefusalReason::LinkExpired => "the link had expired by the app's clock",
        RefusalReason::HandshakeFailed => "the encrypted handshake with the daemon failed",
        RefusalReason::PinMismatch => "the daemon's certificate did not match the link's pin",
    }
}

/// What to do about a refusal.
pub fn refusal_hint(
    reason: RefusalReason,
    link: Option<&PendingLink>,
    frontend: Frontend,
) -> String {
    match reason {
        RefusalReason::UnsupportedLink => format!(
            "The app has only the JavaScript SDK, which cannot use a native link; mint the link \
             with {}.",
            frontend.mint_for("react-native")
        ),
        RefusalReason::LinkExpired => "Mint a new link, and check that the device's clock is \
                                       right (the app compares the link's expiry with it)."
            .to_owned(),
        RefusalReason::HandshakeFailed => "Mint a new link: one minted before the daemon's key \
                                           changed (appduct keygen --force) no longer fits; if it \
                                           fails again, something on the network is altering \
                                           the connection."
            .to_owned(),
        RefusalReason::PinMismatch => {
            let at = link
                .and_then(PendingLink::endpoint)
                .map(|e| format!(" at {e}"))
                .unwrap_or_default();
            format!(
                "Mint a new link: the host key changed since this one was minted (appduct \
                 keygen --force), or another server answered{at}."
            )
        }
    }
}

/// The hint of a wait that timed out on a link nobody claimed (nor refused), by link kind.
pub fn unclaimed_hint(link: Option<&PendingLink>, frontend: Frontend) -> String {
    let endpoint = link.and_then(PendingLink::endpoint);
    match link.and_then(|l| l.transport.as_deref()) {
        Some("native") => format!(
            "No app claimed the link. An app with only the JavaScript SDK cannot use a native \
             link: mint it with {}. A native app must reach {} on the network.",
            frontend.mint_for("react-native"),
            endpoint
                .as_deref()
                .unwrap_or("the daemon's advertised address")
        ),
        Some("web") => "No app claimed the link. 127.0.0.1 is reachable only from this machine, \
                        a simulator, or an Android device through adb reverse; a phone on Wi-Fi \
                        needs a link minted with --for react-native."
            .to_owned(),
        Some("sealed") => format!(
            "No app claimed the link. The phone must reach {} on the LAN; check that it is on the \
             same Wi-Fi and that the firewall lets the port through.",
            endpoint
                .as_deref()
                .unwrap_or("the daemon's advertised address and port")
        ),
        _ => format!(
            "No app claimed the link. Check that the app received it and can reach {}.",
            endpoint.as_deref().unwrap_or("the daemon")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(transport: &str, address: &str) -> PendingLink {
        PendingLink::from_details(Some(&json!({
            "selector": "s", "pending": true, "transport": transport,
            "endpoint": {"address": address, "port": 8443}
        })))
        .unwrap_or_default()
    }

    #[test]
    fn pending_details_are_read_and_anything_else_is_not_a_pending_link() {
        let l = PendingLink::from_details(Some(&json!({
            "selector": "s", "pending": true, "transport": "sealed",
            "endpoint": {"address": "192.168.1.20", "port": 8443}, "refused": "pin_mismatch"
        })));
        assert_eq!(
            l,
            Some(PendingLink {
                transport: Some("sealed".into()),
                address: Some("192.168.1.20".into()),
                port: Some(8443),
                refused: Some(RefusalReason::PinMismatch),
            })
        );
        assert_eq!(
            PendingLink::from_details(Some(&json!({"selector": "s"}))),
            None
        );
        assert_eq!(PendingLink::from_details(None), None);
        // An older daemon: only `pending`.
        assert_eq!(
            PendingLink::from_details(Some(&json!({"pending": true}))),
            Some(PendingLink::default())
        );
    }

    #[test]
    fn timeout_hints_name_the_likely_cause_by_link_kind() {
        let native = unclaimed_hint(Some(&link("native", "192.168.1.20")), Frontend::Cli);
        assert!(
            native.contains("only the JavaScript SDK cannot use a native link"),
            "{native}"
        );
        assert!(native.contains("--for react-native"), "{native}");
        let web = unclaimed_hint(Some(&link("web", "127.0.0.1")), Frontend::Mcp);
        assert!(
            web.contains("127.0.0.1 is reachable only from this machine"),
            "{web}"
        );
        assert!(web.contains("adb reverse"), "{web}");
        let sealed = unclaimed_hint(Some(&link("sealed", "192.168.1.20")), Frontend::Mcp);
        assert!(
            sealed.contains("must reach 192.168.1.20:8443 on the LAN"),
            "{sealed}"
        );
        assert!(sealed.contains("firewall"), "{sealed}");
        let v6 = unclaimed_hint(Some(&link("sealed", "fd00::1")), Frontend::Cli);
        assert!(v6.contains("[fd00::1]:8443"), "{v6}");
        let unknown = unclaimed_hint(None, Frontend::Cli);
        assert!(unknown.starts_with("No app claimed the link"), "{unknown}");
    }

    #[test]
    fn a_refusal_is_unknown_session_with_its_reason_and_a_hint_per_frontend() {
        let f = refusal_failure("Zk3", RefusalReason::UnsupportedLink, None, Frontend::Cli);
        assert_eq!(f.error_type, ErrorType::UnknownSession);
        assert_eq!(f.details["refused"], "unsupported_link");
        assert_eq!(f.details["selector"], "Zk3");
        let hint = f.details["hint"].as_str().unwrap_or_default();
        assert!(hint.contains("only the JavaScript SDK") && hint.contains("--for react-native"));
        let mcp = refusal_hint(RefusalReason::UnsupportedLink, None, Frontend::Mcp);
        assert!(
            mcp.contains("appduct_connect with \"for\": \"react-native\""),
            "{mcp}"
        );
        for reason in RefusalReason::ALL {
            let f = refusal_failure("Zk3", reason, None, Frontend::Mcp);
            assert!(f.message.contains(reason.as_str()), "{}", f.message);
            assert!(!f.details["hint"].as_str().unwrap_or_default().is_empty());
        }
    }

    #[test]
    fn the_registry_wait_lasts_until_the_deadline_and_at_least_the_grace() {
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        assert_eq!(registry_deadline(now, far), far);
        assert_eq!(registry_deadline(now, now), now + REGISTRY_GRACE);
    }
}
