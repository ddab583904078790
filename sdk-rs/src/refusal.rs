//! Link refusals (issue #23; PROTOCOL.md "Refusals"): when a link cannot be used (a failed
//! sealed handshake, a pin mismatch, an expired link), the SDK tells the daemon why with one
//! `link_refused` text frame on a plain WebSocket (the wss port's plain route, or the web
//! listener), so `sessions link --wait` and `appduct_wait_for_session` end at once with the
//! reason. The frame proves the link is held by an HMAC of the claim token; the token itself
//! is never sent. Best effort: a refusal that cannot be delivered changes nothing.

use std::net::IpAddr;
use std::time::Duration;

use appduct_protocol::close::CloseReason;
use appduct_protocol::control::Transport;
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::link::{RefusalReason, refusal_proof};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::core::Endpoint;
use crate::transport::{DialError, DialOptions, dial};

/// What the daemon answered to a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalOutcome {
    /// `1000 refusal_recorded`.
    Recorded,
    /// `1008 invalid_refusal`: unknown or no longer pending link, or a bad proof.
    Invalid,
    /// Any other end (another close, or none).
    Other {
        code: Option<u16>,
        reason: Option<String>,
    },
}

/// The `link_refused` frame for a link.
pub fn refusal_frame(session_id: &str, token: &ClaimToken, reason: RefusalReason) -> String {
    json!({
        "type": "link_refused",
        "session_id": session_id,
        "reason": reason.as_str(),
        "proof": refusal_proof(token, session_id, reason),
    })
    .to_string()
}

/// Sends one `link_refused` frame over a plain WebSocket to `address:port` and waits, within
/// `timeout`, for the daemon's close.
pub async fn send_link_refused(
    address: IpAddr,
    port: u16,
    session_id: &str,
    token: &ClaimToken,
    reason: RefusalReason,
    timeout: Duration,
) -> Result<RefusalOutcome, DialError> {
    let endpoint = Endpoint {
        transport: Transport::Web,
        address,
        port,
        pins: Vec::new(),
        sealed_key: None,
    };
    let options = DialOptions {
        timeout,
        ..DialOptions::default()
    };
    let work = async {
        let mut socket = dial(&endpoint, &options).await?;
        socket
            .send(Message::text(refusal_frame(session_id, token, reason)))
            .await
            .map_err(|e| DialError::Failed(format!("sending the refusal: {e}")))?;
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = match frame {
                        Some(f) => (Some(u16::from(f.code)), Some(f.reason.as_str().to_owned())),
                        None => (None, None),
                    };
                    let known = code
                        .zip(reason.as_deref())
                        .and_then(|(c, r)| CloseReason::from_parts(c, r));
                    return Ok(match known {
                        Some(CloseReason::RefusalRecorded) => RefusalOutcome::Recorded,
                        Some(CloseReason::InvalidRefusal) => RefusalOutcome::Invalid,
                        _ => RefusalOutcome::Other { code, reason },
                    });
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    return Ok(RefusalOutcome::Other {
                        code: None,
                        reason: None,
                    });
                }
            }
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(DialError::Failed(format!(
            "the refusal took longer than {timeout:?}"
        ))),
    }
}
