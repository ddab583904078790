//! The sealed transport (issue #23; PROTOCOL.md "Sealed transport"): a Noise channel inside a
//! plain `ws://` WebSocket to the daemon's wss port. The handshake and record codec are
//! `appduct_protocol::sealed`; this module moves its records over a [`DeviceSocket`].
//!
//! The app's ephemeral key comes from the OS CSPRNG (ring's, through rustls), so message 1 says
//! `{"rng":"csprng"}`. Only a close record is authenticated: a WebSocket close or a TCP loss
//! without one is reported as a lost connection (1006, retried within grace).

use std::time::Duration;

use appduct_protocol::close::CloseReason;
use appduct_protocol::limits::CLOSE_HANDSHAKE_WAIT_MS;
use appduct_protocol::sealed::{
    self, Initiator, Opened, RngSource, SealedError, SealedReceiver, SealedSender,
};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::core::Endpoint;
use crate::transport::{DeviceSocket, DialError, DialOptions, dial};

/// What a sealed socket received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealedEvent {
    /// One complete v2 frame.
    Text(String),
    /// A WebSocket pong (keepalive).
    Pong,
    /// An authenticated close record: the daemon closes with this code and reason.
    CloseRecord { code: u16, reason: String },
    /// The daemon broke the record rules (or a record failed authentication); the socket should
    /// be closed with the error's close ([`SealedSocket::fail`]) and the loss treated as 1006.
    Violation(SealedError),
    /// The socket ended without a close record (WebSocket close, I/O error, end of stream).
    Lost,
}

/// An open sealed channel over a device socket.
pub struct SealedSocket {
    socket: DeviceSocket,
    tx: SealedSender,
    rx: SealedReceiver,
}

impl std::fmt::Debug for SealedSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedSocket")
            .field("tx", &self.tx)
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

/// 32 bytes from the OS CSPRNG (ring's `SystemRandom`, through rustls' provider).
pub fn os_random_key() -> Result<[u8; sealed::KEY_BYTES], DialError> {
    let mut key = [0u8; sealed::KEY_BYTES];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut key)
        .map_err(|_| DialError::Failed("the OS random source failed".to_owned()))?;
    Ok(key)
}

impl SealedSocket {
    /// Opens a plain WebSocket to `endpoint` (its transport must be `sealed` and carry the
    /// daemon's static key) and runs the handshake, all within `options.timeout`.
    pub async fn connect(endpoint: &Endpoint, options: &DialOptions) -> Result<Self, DialError> {
        let Some(static_key) = endpoint.sealed_key else {
            return Err(DialError::Failed(
                "a sealed endpoint needs the daemon's static key".to_owned(),
            ));
        };
        let work = async {
            let socket = dial(endpoint, options).await?;
            Self::handshake(socket, static_key, os_random_key()?).await
        };
        match tokio::time::timeout(options.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(DialError::Failed(format!(
                "opening the sealed channel to {} took longer than {:?}",
                endpoint.url(),
                options.timeout
            ))),
        }
    }

    /// Runs the initiator's handshake on an open socket: message 1 out, message 2 in.
    ///
    /// A message 2 that fails its checks (a daemon without the link's key), or a
    /// `1008 sealed_handshake_failed` close instead of message 2 (the daemon could not read
    /// message 1: the link was minted for another key), is [`DialError::HandshakeFailed`]; any
    /// other end of the socket is a plain failure, retried. Neither is authenticated, so the
    /// core ends only a first claim on `HandshakeFailed`; a held session's resume retries it
    /// within grace like a lost connection.
    pub async fn handshake(
        mut socket: DeviceSocket,
        static_key: [u8; sealed::KEY_BYTES],
        ephemeral: [u8; sealed::KEY_BYTES],
    ) -> Result<Self, DialError> {
        let failed = |what: &str| DialError::Failed(format!("sealed handshake: {what}"));
        let mut initiator = Initiator::new(static_key, ephemeral, RngSource::Csprng)
            .map_err(|e| failed(&e.to_string()))?;
        let message1 = initiator
            .write_message1()
            .map_err(|e| failed(&e.to_string()))?;
        socket
            .send(Message::binary(message1))
            .await
            .map_err(|e| failed(&e.to_string()))?;
        let message2 = loop {
            match socket.next().await {
                Some(Ok(Message::Binary(bytes))) => break bytes,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(Some(frame))))
                    if u16::from(frame.code) == CloseReason::SealedHandshakeFailed.code()
                        && frame.reason.as_str() == CloseReason::SealedHandshakeFailed.reason() =>
                {
                    return Err(DialError::HandshakeFailed);
                }
                Some(Ok(other)) => return Err(failed(&format!("unexpected {other:?}"))),
                Some(Err(e)) => return Err(failed(&e.to_string())),
                None => return Err(failed("the connection ended")),
            }
        };
        if initiator.read_message2(&message2).is_err() {
            let reason = CloseReason::SealedHandshakeFailed;
            close_ws(&mut socket, reason.code(), reason.reason()).await;
            return Err(DialError::HandshakeFailed);
        }
        let (tx, rx) = initiator
            .into_transport()
            .map_err(|e| failed(&e.to_string()))?
            .split();
        Ok(Self { socket, tx, rx })
    }

    /// Seals one v2 frame and sends its records.
    pub async fn send_text(&mut self, text: &str) -> Result<(), tungstenite::Error> {
        let records = self
            .tx
            .seal_frame(text)
            .map_err(|e| tungstenite::Error::Io(std::io::Error::other(e)))?;
        let count = records.len();
        for (i, record) in records.into_iter().enumerate() {
            // One flush per frame, not per record.
            if i + 1 == count {
                self.socket.send(Message::binary(record)).await?;
            } else {
                self.socket.feed(Message::binary(record)).await?;
            }
        }
        Ok(())
    }

    /// A WebSocket ping (keepalive; not sealed, as pongs carry nothing).
    pub async fn ping(&mut self) -> Result<(), tungstenite::Error> {
        self.socket.send(Message::Ping(Default::default())).await
    }

    /// The next event from the daemon.
    pub async fn next(&mut self) -> SealedEvent {
        loop {
            match self.socket.next().await {
                Some(Ok(Message::Binary(record))) => match self.rx.open_record(&record) {
                    Ok(None) => {}
                    Ok(Some(Opened::Frame(text))) => return SealedEvent::Text(text),
                    Ok(Some(Opened::Close { code, reason })) => {
                        return SealedEvent::CloseRecord { code, reason };
                    }
                    Err(e) => return SealedEvent::Violation(e),
                },
                Some(Ok(Message::Text(_))) => {
                    return SealedEvent::Violation(self.rx.text_message());
                }
                Some(Ok(Message::Pong(_))) => return SealedEvent::Pong,
                // Pings are answered by tungstenite on the next read.
                Some(Ok(Message::Ping(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => return SealedEvent::Lost,
            }
        }
    }

    /// Ends the channel: a close record (when `code` may be sent), then a bare `1000`
    /// WebSocket close (the code and reason travel only sealed; without a record, the
    /// WebSocket close carries them), then a bounded wait for the daemon's close.
    pub async fn close(mut self, code: u16, reason: &str) {
        if let Ok(record) = self.tx.seal_close(code, reason) {
            let _ = self.socket.feed(Message::binary(record)).await;
            close_ws(&mut self.socket, 1000, "").await;
        } else {
            close_ws(&mut self.socket, code, reason).await;
        }
    }

    /// Closes after `error`: with a close record first (then a bare `1000`) when the channel
    /// still works.
    pub async fn fail(mut self, error: SealedError) {
        let close = error.close_reason();
        if error.sends_close_record()
            && let Ok(record) = self.tx.seal_close(close.code(), close.reason())
        {
            let _ = self.socket.feed(Message::binary(record)).await;
            close_ws(&mut self.socket, 1000, "").await;
            return;
        }
        close_ws(&mut self.socket, close.code(), close.reason()).await;
    }

    /// After a close record from the daemon: let its WebSocket close be answered.
    pub async fn finish(mut self) {
        drain(&mut self.socket).await;
    }

    /// The socket underneath (testing hatch: raw, unsealed frames).
    pub fn socket_mut(&mut self) -> &mut DeviceSocket {
        &mut self.socket
    }
}

async fn close_ws(socket: &mut DeviceSocket, code: u16, reason: &str) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    if socket.close(Some(frame)).await.is_ok() {
        drain(socket).await;
    }
}

async fn drain(socket: &mut DeviceSocket) {
    let wait = Duration::from_millis(CLOSE_HANDSHAKE_WAIT_MS);
    let _ = tokio::time::timeout(wait, async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
}
