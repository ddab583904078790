//! The raw-frame escape hatch for hostility tests (ARCHITECTURE.md#crates), behind the `testing` feature:
//! send any text or binary frame, close with any code, and, only when asked explicitly, skip
//! the pin check. Nothing here is size-checked or validated.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::core::Endpoint;
use crate::transport::{DeviceSocket, DialError, DialOptions, dial};

/// A frame to put on the wire as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawFrame {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    /// A close frame with any code and reason.
    Close {
        code: u16,
        reason: String,
    },
}

/// What a raw socket received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawMessage {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// The peer's close; `code` is `None` for a close frame without a status.
    Close {
        code: Option<u16>,
        reason: String,
    },
}

pub(crate) async fn send_raw(
    socket: &mut DeviceSocket,
    frame: RawFrame,
) -> Result<(), tungstenite::Error> {
    let message = match frame {
        RawFrame::Text(text) => Message::text(text),
        RawFrame::Binary(bytes) => Message::binary(bytes),
        RawFrame::Ping(bytes) => Message::Ping(bytes.into()),
        RawFrame::Close { code, reason } => Message::Close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        })),
    };
    socket.send(message).await
}

/// A device socket with no session logic at all: the test decides every frame.
pub struct RawSocket {
    socket: DeviceSocket,
}

impl std::fmt::Debug for RawSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSocket").finish_non_exhaustive()
    }
}

impl RawSocket {
    /// Opens a socket like the client does: for `wss://` the leaf must match one of
    /// `endpoint.pins`, unless `skip_pin_check` is set.
    pub async fn connect(endpoint: &Endpoint, skip_pin_check: bool) -> Result<Self, DialError> {
        let options = DialOptions {
            skip_pin_check,
            ..DialOptions::default()
        };
        Ok(Self {
            socket: dial(endpoint, &options).await?,
        })
    }

    pub async fn send(&mut self, frame: RawFrame) -> Result<(), tungstenite::Error> {
        send_raw(&mut self.socket, frame).await
    }

    /// Sends one text frame.
    pub async fn send_text(&mut self, text: impl Into<String>) -> Result<(), tungstenite::Error> {
        self.send(RawFrame::Text(text.into())).await
    }

    /// The next message; `None` once the socket ended (after a close, or on an error).
    pub async fn recv(&mut self) -> Option<RawMessage> {
        loop {
            let message = match self.socket.next().await? {
                Ok(message) => message,
                Err(_) => return None,
            };
            return Some(match message {
                Message::Text(t) => RawMessage::Text(t.as_str().to_owned()),
                Message::Binary(b) => RawMessage::Binary(b.to_vec()),
                Message::Ping(b) => RawMessage::Ping(b.to_vec()),
                Message::Pong(b) => RawMessage::Pong(b.to_vec()),
                Message::Close(frame) => match frame {
                    Some(f) => RawMessage::Close {
                        code: Some(u16::from(f.code)),
                        reason: f.reason.as_str().to_owned(),
                    },
                    None => RawMessage::Close {
                        code: None,
                        reason: String::new(),
                    },
                },
                Message::Frame(_) => continue,
            });
        }
    }

    /// The underlying WebSocket, for anything not covered here.
    pub fn into_inner(self) -> DeviceSocket {
        self.socket
    }
}
