//! Opening device sockets (§D2, §D13.1): `wss://` over tokio-rustls with the SPKI pin checked
//! inside the TLS handshake, before the HTTP upgrade is written, loopback `ws://` for the web
//! listener, and plain `ws://` to the wss port for the sealed transport (whose handshake is
//! `crate::sealed`).

use std::sync::Arc;
use std::time::Duration;

use appduct_protocol::control::Transport;
use appduct_protocol::limits::MAX_MESSAGE_BYTES;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::core::Endpoint;
use crate::trust::PinVerifier;

/// Any byte stream a WebSocket can run over (TLS or plain TCP).
pub trait DeviceIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> DeviceIo for T {}

/// An open device socket.
pub type DeviceSocket = WebSocketStream<Box<dyn DeviceIo>>;

/// Why a socket did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DialError {
    /// The presented leaf's pin is not trusted. Nothing was written after the TLS handshake.
    #[error("the daemon's certificate does not match a trusted pin")]
    PinMismatch,
    /// The sealed handshake failed: the daemon does not hold the static key of the link (issue
    /// #23). Terminal, like a pin mismatch.
    #[error("the sealed handshake failed: the daemon does not hold the link's static key")]
    HandshakeFailed,
    #[error("{0}")]
    Failed(String),
}

/// How sockets are opened.
#[derive(Debug, Clone)]
pub struct DialOptions {
    /// Bound on TCP connect + TLS handshake + HTTP upgrade.
    pub timeout: Duration,
    /// Testing only: accept any certificate (hostility tests).
    pub skip_pin_check: bool,
}

impl Default for DialOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            skip_pin_check: false,
        }
    }
}

/// WebSocket limits of a device socket: the protocol's 262144-byte message bound.
///
/// The read buffer is 8 KiB, not tungstenite's 128 KiB: it is allocated per socket and its free
/// part is zeroed before every read, which made each small frame pay a 128 KiB memset.
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(8 * 1024)
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
}

/// Opens a socket to `endpoint`: TCP, then (native) TLS with the pin check, then the upgrade.
pub async fn dial(endpoint: &Endpoint, options: &DialOptions) -> Result<DeviceSocket, DialError> {
    match tokio::time::timeout(options.timeout, dial_inner(endpoint, options)).await {
        Ok(result) => result,
        Err(_) => Err(DialError::Failed(format!(
            "opening {} took longer than {:?}",
            endpoint.url(),
            options.timeout
        ))),
    }
}

async fn dial_inner(endpoint: &Endpoint, options: &DialOptions) -> Result<DeviceSocket, DialError> {
    let tcp = TcpStream::connect((endpoint.address, endpoint.port))
        .await
        .map_err(|e| DialError::Failed(format!("TCP connect to {}: {e}", endpoint.url())))?;
    // Frames are small and latency matters more than batching.
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn DeviceIo> = match endpoint.transport {
        Transport::Web => Box::new(tcp),
        Transport::Native => Box::new(tls_handshake(tcp, endpoint, options).await?),
        // The plain route of the wss port; the Noise handshake runs over the WebSocket
        // (`crate::sealed`).
        Transport::Sealed => Box::new(tcp),
    };
    let (socket, _response) =
        tokio_tungstenite::client_async_with_config(endpoint.url(), io, Some(websocket_config()))
            .await
            .map_err(|e| DialError::Failed(format!("WebSocket upgrade: {e}")))?;
    Ok(socket)
}

/// The TLS handshake completes (and so the pin check passes) before anything else is written.
async fn tls_handshake(
    tcp: TcpStream,
    endpoint: &Endpoint,
    options: &DialOptions,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, DialError> {
    if endpoint.pins.is_empty() && !options.skip_pin_check {
        // Never reached through `Client::connect`, which refuses to dial without a pin.
        return Err(DialError::PinMismatch);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(PinVerifier::new(
        endpoint.pins.clone(),
        provider.clone(),
        options.skip_pin_check,
    ));
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DialError::Failed(format!("TLS configuration: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let server_name = ServerName::IpAddress(endpoint.address.into());
    TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|e| {
            if verifier.saw_mismatch() {
                DialError::PinMismatch
            } else {
                DialError::Failed(format!("TLS handshake: {e}"))
            }
        })
}
