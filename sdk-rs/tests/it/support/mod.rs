//! An in-process fake daemon for the client tests: a `wss://` listener on 127.0.0.1 with an
//! rcgen-minted P-256 leaf (or a plain `ws://` one), which reports every accepted TCP
//! connection's fate so tests can prove what reached it.

#![allow(dead_code)]

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use appduct_protocol::bootstrap::BootstrapPayload;
use appduct_protocol::ids::ClaimToken;
use appduct_protocol::link::compose_deep_link;
use appduct_protocol::pin::SpkiPin;
use futures_util::{SinkExt, StreamExt};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

pub type TestResult = Result<(), Box<dyn Error>>;

/// Upper bound for any awaited event; never a synchronisation sleep.
pub const WAIT: Duration = Duration::from_secs(10);

pub const SESSION: &str = "Qm9vdHN0cmFwSWQx";
pub const TOKEN_BYTES: [u8; 32] = [7; 32];

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What happened to one accepted TCP connection.
pub enum Accepted {
    /// The TLS handshake failed: no HTTP request was ever read.
    TlsFailed(String),
    /// The WebSocket upgrade succeeded; `path` is the request target, `host` its Host header.
    Upgraded {
        conn: Box<FakeConn>,
        path: String,
        host: String,
    },
}

pub struct FakeDaemon {
    pub addr: SocketAddr,
    /// The pin of the served leaf (`None` for the web listener).
    pub pin: Option<SpkiPin>,
    accepted: mpsc::UnboundedReceiver<Accepted>,
}

fn mint_leaf() -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), Box<dyn Error>> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?;
    let cert = params.self_signed(&key)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((cert.der().clone(), key_der))
}

/// A pin that no test leaf has.
pub fn foreign_pin() -> SpkiPin {
    SpkiPin::from_spki_der(b"some other key")
}

impl FakeDaemon {
    /// A `wss://` listener serving a fresh P-256 leaf.
    pub async fn wss() -> Result<Self, Box<dyn Error>> {
        let (cert, key) = mint_leaf()?;
        let pin = SpkiPin::from_certificate_der(cert.as_ref())?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
        Self::start(Some(TlsAcceptor::from(Arc::new(config))), Some(pin)).await
    }

    /// A plain `ws://` listener, like the daemon's web listener.
    pub async fn web() -> Result<Self, Box<dyn Error>> {
        Self::start(None, None).await
    }

    async fn start(tls: Option<TlsAcceptor>, pin: Option<SpkiPin>) -> Result<Self, Box<dyn Error>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, accepted) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tx = tx.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let _ = tx.send(accept(tcp, tls).await);
                });
            }
        });
        Ok(Self {
            addr,
            pin,
            accepted,
        })
    }

    /// The next accepted connection's fate.
    pub async fn next(&mut self) -> Result<Accepted, Box<dyn Error>> {
        Ok(timeout(WAIT, self.accepted.recv())
            .await?
            .ok_or("listener stopped")?)
    }

    /// The next connection, which must upgrade.
    pub async fn next_conn(&mut self) -> Result<FakeConn, Box<dyn Error>> {
        match self.next().await? {
            Accepted::Upgraded { conn, .. } => Ok(*conn),
            Accepted::TlsFailed(e) => Err(format!("TLS failed: {e}").into()),
        }
    }

    /// Whether a connection arrives within `within` (for "does not reconnect" checks).
    pub async fn connection_within(&mut self, within: Duration) -> bool {
        timeout(within, self.accepted.recv()).await.is_ok()
    }

    /// A bootstrap payload for this listener.
    pub fn payload(&self, expires_at: u64) -> String {
        BootstrapPayload::new(
            self.addr.ip(),
            self.addr.port(),
            SESSION.to_owned(),
            ClaimToken::from_bytes(TOKEN_BYTES),
            expires_at,
        )
        .encode()
        .unwrap_or_default()
    }

    /// A native deep link carrying this daemon's pin, valid for five minutes.
    pub fn link(&self) -> String {
        self.link_expiring(now_s() + 300)
    }

    pub fn link_expiring(&self, expires_at: u64) -> String {
        compose_deep_link("demo", &self.payload(expires_at), self.pin.as_ref()).unwrap_or_default()
    }
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn claim_token() -> String {
    ClaimToken::from_bytes(TOKEN_BYTES).to_base64url()
}

// tungstenite's callback signature returns its (large) error response by value.
#[allow(clippy::result_large_err)]
async fn accept(tcp: TcpStream, tls: Option<TlsAcceptor>) -> Accepted {
    let io: Box<dyn Io> = match tls {
        Some(acceptor) => match acceptor.accept(tcp).await {
            Ok(stream) => Box::new(stream),
            Err(e) => return Accepted::TlsFailed(e.to_string()),
        },
        None => Box::new(tcp),
    };
    let mut path = String::new();
    let mut host = String::new();
    let callback = |req: &Request, resp: Response| {
        path = req.uri().to_string();
        host = req
            .headers()
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok(resp)
    };
    match tokio_tungstenite::accept_hdr_async(io, callback).await {
        Ok(ws) => Accepted::Upgraded {
            conn: Box::new(FakeConn { ws }),
            path,
            host,
        },
        Err(e) => Accepted::TlsFailed(format!("upgrade failed: {e}")),
    }
}

/// One device socket, daemon side.
pub struct FakeConn {
    ws: WebSocketStream<Box<dyn Io>>,
}

/// What the fake daemon read, besides text frames.
#[derive(Debug, PartialEq)]
pub enum Read {
    Frame(Value),
    Ping,
    Pong(Vec<u8>),
    Binary(Vec<u8>),
    Close(Option<(u16, String)>),
    Ended,
}

impl FakeConn {
    /// The next message of any kind.
    pub async fn read(&mut self) -> Result<Read, Box<dyn Error>> {
        loop {
            let Some(message) = timeout(WAIT, self.ws.next()).await? else {
                return Ok(Read::Ended);
            };
            return Ok(match message {
                Ok(Message::Text(t)) => Read::Frame(serde_json::from_str(t.as_str())?),
                Ok(Message::Binary(b)) => Read::Binary(b.to_vec()),
                Ok(Message::Ping(_)) => Read::Ping,
                Ok(Message::Close(f)) => {
                    Read::Close(f.map(|f| (u16::from(f.code), f.reason.as_str().to_owned())))
                }
                Ok(Message::Pong(b)) => Read::Pong(b.to_vec()),
                Ok(Message::Frame(_)) => continue,
                Err(_) => Read::Ended,
            });
        }
    }

    /// The next text frame; pings and pongs are skipped (tungstenite answers pings).
    pub async fn frame(&mut self) -> Result<Value, Box<dyn Error>> {
        loop {
            match self.read().await? {
                Read::Frame(v) => return Ok(v),
                Read::Ping | Read::Pong(_) => continue,
                other => return Err(format!("expected a frame, got {other:?}").into()),
            }
        }
    }

    /// The next text frame, which must have this `type`.
    pub async fn frame_of(&mut self, ty: &str) -> Result<Value, Box<dyn Error>> {
        let frame = self.frame().await?;
        if frame["type"] == ty {
            Ok(frame)
        } else {
            Err(format!("expected {ty}, got {frame}").into())
        }
    }

    pub async fn send(&mut self, frame: Value) -> TestResult {
        self.ws.send(Message::text(frame.to_string())).await?;
        Ok(())
    }

    pub async fn send_message(&mut self, message: Message) -> TestResult {
        self.ws.send(message).await?;
        Ok(())
    }

    pub async fn ack(
        &mut self,
        resume_token: &str,
        grace_s: u64,
        event_registry: bool,
    ) -> TestResult {
        self.ack_with(resume_token, grace_s, 15, event_registry)
            .await
    }

    pub async fn ack_with(
        &mut self,
        resume_token: &str,
        grace_s: u64,
        keepalive_s: u64,
        event_registry: bool,
    ) -> TestResult {
        let mut ack = json!({"type": "session_ack", "session_id": SESSION, "status": "ok",
                             "alias": "fake-device", "resume_token": resume_token,
                             "keepalive_interval_s": keepalive_s, "grace_s": grace_s});
        if event_registry {
            ack["event_registry"] = json!(true);
        }
        self.send(ack).await
    }

    /// Reads the claim, acks it and returns the claim frame.
    pub async fn accept_claim(&mut self, event_registry: bool) -> Result<Value, Box<dyn Error>> {
        let claim = self.frame_of("session_claim").await?;
        self.ack("resume-1", 600, event_registry).await?;
        Ok(claim)
    }

    pub async fn call(&mut self, id: &str, name: &str, args: Value) -> TestResult {
        self.send(json!({"type": "tool_call", "session_id": SESSION, "id": id, "name": name, "args": args}))
            .await
    }

    pub async fn close(&mut self, code: u16, reason: &str) -> TestResult {
        self.ws
            .close(Some(CloseFrame {
                code: CloseCode::from(code),
                reason: reason.into(),
            }))
            .await?;
        Ok(())
    }
}
