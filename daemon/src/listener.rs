//! The device listeners (§D2, §D6): `wss://` on `wssPort` and loopback `ws://` for web pages.
//!
//! Each accepted TCP connection takes a pre-claim slot from its listener's own [`PreclaimBudget`]
//! (which may evict an older pending connection, see [`crate::preclaim`]), or is closed at once
//! without reading. Its pre-claim deadline starts at accept and bounds the TLS handshake and the
//! HTTP upgrade (TCP is dropped when it passes first, or when the slot is evicted). An opened
//! WebSocket is handed on as an [`AcceptedDevice`], together with its slot and deadline, for the
//! session engine to claim or close `1008 pre_claim_timeout`.
//!
//! The upgrade request head is read here (bounded) instead of inside tungstenite, because
//! tungstenite answers nothing to a non-upgrade request while the web listener must answer `426`,
//! and the checks must run in the order of §D2.2. The `101` never selects a subprotocol.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use appduct_protocol::limits;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::handshake::machine::TryParse;
use tokio_tungstenite::tungstenite::handshake::server::Request;
use tokio_tungstenite::tungstenite::http::{self, HeaderValue, header};
use tokio_tungstenite::tungstenite::protocol::Role;

use appduct_protocol::close::CloseReason;
use appduct_protocol::control::RngSource;
use appduct_protocol::sealed::{self, Responder, SealedChannel, SealedError, StaticKeypair};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::device_socket::{self, DeviceSocket, flag_set};
use crate::links::random_bytes;
use crate::preclaim::{Eviction, Progress};

/// Largest upgrade request head read before giving up on a connection.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
const LISTEN_BACKLOG: u32 = 1024;
/// Pause after a failed `accept` (e.g. out of descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// The listener a connection arrived on (§D2.4); the one wire enum lives in the protocol crate.
pub use appduct_protocol::control::Transport;

pub use crate::preclaim::{PreclaimBudget, PreclaimPolicy, PreclaimSlot, Refusal};

/// An opened device WebSocket, not yet claimed.
#[derive(Debug)]
pub struct AcceptedDevice {
    pub socket: DeviceSocket,
    pub transport: Transport,
    pub peer: SocketAddr,
    pub preclaim: PreclaimSlot,
    /// TCP accept plus the pre-claim timeout; the engine closes `1008 pre_claim_timeout` when no
    /// valid claim or resume was processed by then.
    pub claim_deadline: Instant,
}

/// What a listener's accept loops share. The daemon gives each listener its own `preclaim`.
#[derive(Debug, Clone)]
pub struct AcceptContext {
    pub preclaim: PreclaimBudget,
    /// `limits::PRE_CLAIM_TIMEOUT_MS` in production; tests lower it.
    pub pre_claim_timeout: Duration,
    /// Opened connections go here. When the receiver is dropped the listeners stop.
    pub accepted: mpsc::Sender<AcceptedDevice>,
    /// Set to `true` to stop accepting and abandon connections still in their handshake.
    pub shutdown: watch::Receiver<bool>,
}

/// The web listener's view of the daemon configuration.
#[derive(Debug, Clone)]
pub struct WebPolicy {
    /// The bound web port, which `Host` must name.
    pub port: u16,
    /// `webOrigins` from `config.json` (§S2.2), already validated.
    pub origins: Vec<String>,
}

/// Running accept loops of one listener.
#[derive(Debug)]
pub struct RunningListener {
    addrs: Vec<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningListener {
    /// The first bound address (the dual-stack or wildcard socket for wss).
    pub fn local_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Waits until every accept loop has stopped (after shutdown) and its sockets are closed.
    pub async fn stopped(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------

/// Binds the wss listener (§D2.1): one dual-stack `[::]` socket with `IPV6_V6ONLY` off, or
/// `0.0.0.0` where IPv6 is unavailable; on macOS also `127.0.0.1` on the same port. Port `0` lets
/// the OS choose. Must run inside a tokio runtime.
pub fn bind_wss(port: u16) -> io::Result<Vec<TcpListener>> {
    let primary = match bind_dual_stack(port) {
        Ok(listener) => listener,
        Err(error) if ipv6_unavailable(&error) => {
            bind_v4(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))?
        }
        Err(error) => return Err(error),
    };
    #[cfg_attr(not(target_os = "macos"), allow(unused_mut))]
    let mut listeners = vec![primary];
    #[cfg(target_os = "macos")]
    {
        // Holds the specific loopback address so no other process can bind it underneath the
        // wildcard (the loopback fast path of §L6.4 relies on it).
        let bound = listeners[0].local_addr()?.port();
        listeners.push(bind_v4(SocketAddr::from((Ipv4Addr::LOCALHOST, bound)))?);
    }
    Ok(listeners)
}

/// Binds the web listener on `127.0.0.1` with an OS-assigned port (§D2.2).
pub fn bind_web() -> io::Result<TcpListener> {
    bind_v4(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
}

fn bind_dual_stack(port: u16) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v6()?;
    rustix::net::sockopt::set_ipv6_v6only(&socket, false)?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)))?;
    socket.listen(LISTEN_BACKLOG)
}

fn bind_v4(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

fn ipv6_unavailable(error: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(
        Errno::from_io_error(error),
        Some(Errno::AFNOSUPPORT | Errno::ADDRNOTAVAIL | Errno::PROTONOSUPPORT)
    )
}

// ---------------------------------------------------------------------------------------------
// Accepting
// ---------------------------------------------------------------------------------------------

enum Flavor {
    /// The wss port: TLS, or the plain route of the sealed transport, by the first byte.
    Wss(TlsAcceptor, Arc<StaticKeypair>),
    Web(WebPolicy),
}

/// Starts the wss accept loops on listeners from [`bind_wss`]. `sealed` is the static key of
/// the plain route's Noise responder (issue #23).
pub fn serve_wss(
    listeners: Vec<TcpListener>,
    tls: Arc<rustls::ServerConfig>,
    sealed: Arc<StaticKeypair>,
    ctx: AcceptContext,
) -> io::Result<RunningListener> {
    serve(listeners, Flavor::Wss(TlsAcceptor::from(tls), sealed), ctx)
}

/// Starts the web accept loop on a listener from [`bind_web`].
pub fn serve_web(
    listener: TcpListener,
    origins: Vec<String>,
    ctx: AcceptContext,
) -> io::Result<RunningListener> {
    let port = listener.local_addr()?.port();
    serve(
        vec![listener],
        Flavor::Web(WebPolicy { port, origins }),
        ctx,
    )
}

fn serve(
    listeners: Vec<TcpListener>,
    flavor: Flavor,
    ctx: AcceptContext,
) -> io::Result<RunningListener> {
    let addrs = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<io::Result<Vec<_>>>()?;
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no listening socket",
        ));
    }
    let flavor = Arc::new(flavor);
    let tasks = listeners
        .into_iter()
        .map(|listener| tokio::spawn(accept_loop(listener, Arc::clone(&flavor), ctx.clone())))
        .collect();
    Ok(RunningListener { addrs, tasks })
}

async fn accept_loop(listener: TcpListener, flavor: Arc<Flavor>, ctx: AcceptContext) {
    let mut shutdown = ctx.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = flag_set(&mut shutdown) => return,
            _ = ctx.accepted.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!("device listener accept failed: {error}");
                tokio::select! {
                    _ = flag_set(&mut shutdown) => return,
                    _ = tokio::time::sleep(ACCEPT_ERROR_BACKOFF) => continue,
                }
            }
        };
        let accepted_at = Instant::now();
        // IPv4 clients of the dual-stack socket appear as `::ffff:a.b.c.d`; report them as IPv4.
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let slot = match ctx.preclaim.admit_at(peer.ip(), progress_at_accept(&tcp)) {
            Ok(slot) => slot,
            Err(refusal) => {
                tracing::debug!(%peer, "pre-claim slot refused ({refusal}); connection closed");
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(open_connection(
            tcp,
            peer,
            accepted_at,
            slot,
            Arc::clone(&flavor),
            ctx.clone(),
        ));
    }
}

/// Whether the peer's first bytes (TLS ClientHello, upgrade request) are already waiting, so a
/// client that is talking is not taken for idle during a burst of accepts.
fn progress_at_accept(tcp: &TcpStream) -> Progress {
    use rustix::net::{RecvFlags, recv};
    let mut byte = [0u8; 1];
    #[cfg(unix)]
    let flags = RecvFlags::PEEK | RecvFlags::DONTWAIT;
    // No MSG_DONTWAIT on Windows; tokio's sockets are non-blocking already.
    #[cfg(windows)]
    let flags = RecvFlags::PEEK;
    match recv(tcp, &mut byte, flags) {
        Ok((1.., _)) => Progress::Handshaking,
        _ => Progress::Idle,
    }
}

async fn open_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    accepted_at: Instant,
    slot: PreclaimSlot,
    flavor: Arc<Flavor>,
    ctx: AcceptContext,
) {
    let claim_deadline = accepted_at + ctx.pre_claim_timeout;
    let mut shutdown = ctx.shutdown.clone();
    let eviction = slot.eviction();
    let opened = tokio::select! {
        biased;
        _ = flag_set(&mut shutdown) => return,
        _ = eviction.evicted() => {
            tracing::debug!(%peer, "evicted from the pre-claim budget during the handshake");
            return;
        }
        opened = tokio::time::timeout_at(claim_deadline, async {
            // An idle socket stays in the first eviction class until its peer sends something.
            // `peek`, not `readable`: readiness may be a false positive.
            let mut first = [0u8; 1];
            if tcp.peek(&mut first).await? == 0 {
                return Err(OpenError::Eof);
            }
            eviction.advance(Progress::Handshaking);
            let opened = open(tcp, first[0], &flavor, eviction.clone()).await?;
            eviction.advance(Progress::Open);
            Ok::<_, OpenError>(opened)
        }) => opened,
    };
    let (socket, transport) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(error)) => {
            tracing::debug!(%peer, "device connection not opened: {error}");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "pre-claim timeout before the WebSocket opened");
            return;
        }
    };
    let device = AcceptedDevice {
        socket,
        transport,
        peer,
        preclaim: slot,
        claim_deadline,
    };
    // Dropping an undelivered device drops its sender, which terminates the connection.
    tokio::select! {
        biased;
        _ = flag_set(&mut shutdown) => {}
        _ = ctx.accepted.send(device) => {}
    }
}

/// Why an accepted TCP connection did not become a WebSocket.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("I/O error during the upgrade: {0}")]
    Io(#[from] io::Error),
    #[error("connection closed before a complete request head")]
    Eof,
    #[error("request head larger than {MAX_REQUEST_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("upgrade refused: {0:?}")]
    Rejected(Rejection),
    #[error("first byte {0:#04x} is neither a TLS handshake nor an HTTP GET")]
    UnknownFirstByte(u8),
    #[error("sealed handshake failed: {0}")]
    Sealed(SealedError),
    #[error("the peer left before the sealed handshake")]
    NoHandshake,
}

/// First byte of a TLS handshake record: the native transport.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;
/// First byte of an HTTP `GET`: the plain route of the sealed transport.
pub const PLAIN_ROUTE_BYTE: u8 = b'G';

async fn open(
    tcp: TcpStream,
    first: u8,
    flavor: &Flavor,
    eviction: Eviction,
) -> Result<(DeviceSocket, Transport), OpenError> {
    match flavor {
        Flavor::Wss(acceptor, _) if first == TLS_HANDSHAKE_BYTE => {
            let tls = acceptor.accept(tcp).await.map_err(OpenError::Tls)?;
            let ws = upgrade(tls, None, device_socket::websocket_config()).await?;
            let socket = device_socket::from_websocket_evictable(ws, eviction);
            Ok((socket, Transport::Native))
        }
        Flavor::Wss(_, sealed) if first == PLAIN_ROUTE_BYTE => {
            let ws = upgrade(tcp, None, device_socket::plain_route_config()).await?;
            let socket = plain_route(ws, sealed, eviction).await?;
            Ok((socket, Transport::Sealed))
        }
        Flavor::Wss(..) => Err(OpenError::UnknownFirstByte(first)),
        Flavor::Web(policy) => {
            let ws = upgrade(tcp, Some(policy), device_socket::websocket_config()).await?;
            let socket = device_socket::from_websocket_evictable(ws, eviction);
            Ok((socket, Transport::Web))
        }
    }
}

/// The plain route after its upgrade (issue #23): the first message decides. Binary is Noise
/// message 1: answered with message 2, then the connection is sealed. Text is handed on as it
/// is (a `link_refused` frame, or a cleartext claim the engine refuses). A handshake that fails
/// is closed `1008 sealed_handshake_failed` here. Pings before it are answered by tungstenite.
/// The caller bounds all of this by the pre-claim deadline and the slot's eviction.
async fn plain_route(
    mut ws: WebSocketStream<TcpStream>,
    keys: &StaticKeypair,
    eviction: Eviction,
) -> Result<DeviceSocket, OpenError> {
    let first = loop {
        match ws.next().await {
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
            Some(Ok(message)) => break message,
            Some(Err(error)) => {
                let too_big = matches!(error, tungstenite::Error::Capacity(_));
                if too_big {
                    close_plain(&mut ws, CloseReason::MessageTooBig).await;
                }
                return Err(OpenError::Io(io::Error::other(error.to_string())));
            }
            None => return Err(OpenError::NoHandshake),
        }
    };
    match first {
        Message::Binary(message1) => match sealed_handshake(&mut ws, keys, &message1).await {
            Ok((channel, rng)) => Ok(device_socket::from_sealed_websocket(
                ws, channel, rng, eviction,
            )),
            Err(error) => {
                if error == SealedError::HandshakeFailed {
                    close_plain(&mut ws, CloseReason::SealedHandshakeFailed).await;
                }
                Err(OpenError::Sealed(error))
            }
        },
        Message::Text(text) => Ok(device_socket::from_plain_route_text(
            ws,
            text.as_str().to_owned(),
            eviction,
        )),
        _ => Err(OpenError::NoHandshake),
    }
}

/// Responder side of the handshake: message 1 in, message 2 out, then the channel.
async fn sealed_handshake(
    ws: &mut WebSocketStream<TcpStream>,
    keys: &StaticKeypair,
    message1: &[u8],
) -> Result<(SealedChannel, RngSource), SealedError> {
    let ephemeral = random_bytes::<{ sealed::KEY_BYTES }>().map_err(|_| SealedError::Internal)?;
    let mut responder = Responder::new(keys, ephemeral)?;
    let hello = responder.read_message1(message1)?;
    let message2 = responder.write_message2()?;
    let channel = responder.into_transport()?;
    ws.send(Message::Binary(message2.into()))
        .await
        .map_err(|_| SealedError::Internal)?;
    let rng = match hello.rng {
        sealed::RngSource::Csprng => RngSource::Csprng,
        sealed::RngSource::Drbg => RngSource::Drbg,
    };
    Ok((channel, rng))
}

/// Sends a close on the plain route before the channel exists and drops TCP within the close
/// wait.
async fn close_plain(ws: &mut WebSocketStream<TcpStream>, reason: CloseReason) {
    let frame = CloseFrame {
        code: CloseCode::from(reason.code()),
        reason: reason.reason().into(),
    };
    let wait = Duration::from_millis(limits::CLOSE_HANDSHAKE_WAIT_MS);
    let _ = tokio::time::timeout(wait, async {
        if ws.close(Some(frame)).await.is_ok() {
            // Until the peer's close (or EOF): it then reads ours before TCP goes.
            while let Some(Ok(_)) = ws.next().await {}
        }
    })
    .await;
}

/// Reads the request head, applies [`check_upgrade`], answers, and opens the WebSocket.
async fn upgrade<S>(
    mut stream: S,
    web: Option<&WebPolicy>,
    config: WebSocketConfig,
) -> Result<WebSocketStream<S>, OpenError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (request, tail) = match read_request_head(&mut stream).await? {
        Head::Complete(request, tail) => (request, tail),
        Head::NotUpgrade => {
            refuse(&mut stream, Rejection::NotUpgrade).await;
            return Err(OpenError::Rejected(Rejection::NotUpgrade));
        }
    };
    let key = match check_upgrade(&request, web) {
        Ok(key) => key,
        Err(rejection) => {
            refuse(&mut stream, rejection).await;
            return Err(OpenError::Rejected(rejection));
        }
    };
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        derive_accept_key(key.as_bytes())
    );
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    Ok(WebSocketStream::from_partially_read(stream, tail, Role::Server, Some(config)).await)
}

enum Head {
    /// The parsed request and any bytes that followed it.
    Complete(Box<Request>, Vec<u8>),
    /// Not a parsable `GET` request: answered with `426`.
    NotUpgrade,
}

async fn read_request_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Head, OpenError> {
    let mut head = Vec::with_capacity(1024);
    const CHUNK: usize = 1024;
    let mut chunk = [0u8; CHUNK];
    loop {
        let room = MAX_REQUEST_HEAD_BYTES - head.len();
        if room == 0 {
            return Err(OpenError::HeadTooLarge);
        }
        let n = stream.read(&mut chunk[..room.min(CHUNK)]).await?;
        if n == 0 {
            return Err(OpenError::Eof);
        }
        head.extend_from_slice(&chunk[..n]);
        match Request::try_parse(&head) {
            Ok(Some((len, request))) => {
                return Ok(Head::Complete(Box::new(request), head.split_off(len)));
            }
            Ok(None) => {}
            // Another method, HTTP/1.0, or not HTTP at all.
            Err(_) => return Ok(Head::NotUpgrade),
        }
    }
}

/// Writes the refusal and half-closes; the rest of the peer's data is read and discarded briefly
/// so the response is not lost to a reset.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, rejection: Rejection) {
    let _ = tokio::time::timeout(
        Duration::from_millis(limits::CLOSE_HANDSHAKE_WAIT_MS),
        async {
            stream.write_all(rejection.response().as_bytes()).await?;
            stream.flush().await?;
            stream.shutdown().await?;
            let mut scratch = [0u8; 1024];
            while stream.read(&mut scratch).await? != 0 {}
            io::Result::Ok(())
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Upgrade checks (pure)
// ---------------------------------------------------------------------------------------------

/// A refused upgrade request. A refusal consumes nothing: no claim attempt, no state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Not a WebSocket upgrade: `426` with `Upgrade: websocket` (§D2.2 step 1).
    NotUpgrade,
    /// `Host` is not a loopback name with the web port: `403` (step 2).
    Host,
    /// `Origin` refused: `403` (step 3).
    Origin,
    /// `Sec-WebSocket-Version` other than 13: `426` with `Sec-WebSocket-Version: 13` (RFC 6455).
    Version,
    /// No `Sec-WebSocket-Key`: `400`.
    MissingKey,
}

impl Rejection {
    pub const fn status(self) -> u16 {
        match self {
            Self::NotUpgrade | Self::Version => 426,
            Self::Host | Self::Origin => 403,
            Self::MissingKey => 400,
        }
    }

    const fn response(self) -> &'static str {
        match self {
            Self::NotUpgrade => {
                "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: close\r\n\
                 Content-Length: 0\r\n\r\n"
            }
            Self::Version => {
                "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\n\
                 Sec-WebSocket-Version: 13\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            }
            Self::Host | Self::Origin => {
                "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            }
            Self::MissingKey => {
                "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
            }
        }
    }
}

/// Whether any comma-separated token of any value of `name` equals `token` (case-insensitive).
fn header_has_token(headers: &http::HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value
                .split(',')
                .any(|item| item.trim().eq_ignore_ascii_case(token))
        })
    })
}

/// Applies the upgrade checks in the order of §D2.2 and returns the `Sec-WebSocket-Key`.
/// `web` is `None` on the wss listener, which checks neither `Host` nor `Origin` (§D2.1).
pub fn check_upgrade<'r>(
    request: &'r Request,
    web: Option<&WebPolicy>,
) -> Result<&'r HeaderValue, Rejection> {
    let headers = request.headers();
    let is_upgrade = request.method() == http::Method::GET
        && request.version() >= http::Version::HTTP_11
        && header_has_token(headers, header::UPGRADE, "websocket")
        && header_has_token(headers, header::CONNECTION, "upgrade");
    if !is_upgrade {
        return Err(Rejection::NotUpgrade);
    }
    if let Some(policy) = web {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host_ok = match (hosts.next(), hosts.next()) {
            (Some(host), None) => host
                .to_str()
                .is_ok_and(|host| host_allowed(host, policy.port)),
            _ => false,
        };
        if !host_ok {
            return Err(Rejection::Host);
        }
        let origins: Option<Vec<&str>> = headers
            .get_all(header::ORIGIN)
            .iter()
            .map(|value| value.to_str().ok())
            .collect();
        if !origins.is_some_and(|origins| origin_allowed(&origins, &policy.origins)) {
            return Err(Rejection::Origin);
        }
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|version| version.as_bytes() != b"13")
    {
        return Err(Rejection::Version);
    }
    headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or(Rejection::MissingKey)
}

/// `Host` of a web upgrade: `127.0.0.1`, `localhost` or `[::1]` with the web port, ASCII
/// case-insensitive (§D2.2 step 2).
pub fn host_allowed(host: &str, web_port: u16) -> bool {
    let host = host.trim_matches([' ', '\t']);
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|name| host.eq_ignore_ascii_case(&format!("{name}:{web_port}")))
}

/// Every `Origin` value of a web upgrade, in order (§D2.2 step 3): none is allowed, several
/// are not, `null` is not, a loopback origin or a `webOrigins` entry (ASCII case-insensitive) is.
pub fn origin_allowed(origins: &[&str], web_origins: &[String]) -> bool {
    match origins {
        [] => true,
        [origin] => {
            let origin = origin.trim_matches([' ', '\t']);
            origin != "null"
                && (is_loopback_origin(origin)
                    || web_origins
                        .iter()
                        .any(|allowed| allowed.eq_ignore_ascii_case(origin)))
        }
        _ => false,
    }
}

/// `http` or `https`, host exactly `localhost`, `127.0.0.1` or `[::1]`, an optional port, and
/// nothing after it (no path, not even `/`).
pub fn is_loopback_origin(origin: &str) -> bool {
    let origin = origin.to_ascii_lowercase();
    let Some(authority) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let (host, rest) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(end) => authority.split_at(end + 1),
            None => return false,
        }
    } else {
        authority.split_at(authority.find(':').unwrap_or(authority.len()))
    };
    if !matches!(host, "localhost" | "127.0.0.1" | "[::1]") {
        return false;
    }
    match rest.strip_prefix(':') {
        None => rest.is_empty(),
        Some(port) => {
            (1..=5).contains(&port.len())
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: u16 = 41234;

    fn policy(origins: &[&str]) -> WebPolicy {
        WebPolicy {
            port: PORT,
            origins: origins.iter().map(|o| (*o).to_owned()).collect(),
        }
    }

    /// A valid web upgrade request plus extra headers.
    fn request(extra: &[(&str, &str)]) -> Request {
        let mut builder = http::Request::builder()
            .method("GET")
            .uri("/ignored?x=1")
            .header("Host", format!("127.0.0.1:{PORT}"))
            .header("Connection", "Upgrade")
            .header("Upgrade", "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
        for (name, value) in extra {
            builder = builder.header(*name, *value);
        }
        builder
            .body(())
            .unwrap_or_else(|e| panic!("test request: {e}"))
    }

    fn without(mut request: Request, name: header::HeaderName) -> Request {
        request.headers_mut().remove(name);
        request
    }

    fn with(mut request: Request, name: header::HeaderName, value: &'static str) -> Request {
        request
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
        request
    }

    #[test]
    fn host_accepts_only_loopback_names_with_the_web_port() {
        for ok in [
            "127.0.0.1:41234",
            "localhost:41234",
            "LocalHost:41234",
            "[::1]:41234",
        ] {
            assert!(host_allowed(ok, PORT), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "localhost",
            "[::1]",
            "127.0.0.1:41235",
            "localhost:8443",
            "evil.example:41234",
            "localhost.evil.example:41234",
            "0.0.0.0:41234",
            "192.168.1.20:41234",
            "::1:41234",
            "127.0.0.1:041234",
            "",
        ] {
            assert!(!host_allowed(bad, PORT), "{bad}");
        }
    }

    #[test]
    fn loopback_origins_are_exact() {
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://localhost:443",
            "http://127.0.0.1",
            "https://127.0.0.1:8080",
            "http://[::1]",
            "https://[::1]:5173",
            "HTTP://LOCALHOST:3000",
            "http://localhost:65535",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "http://localhost.evil.example",
            "http://localhost:3000/",
            "http://localhost/path",
            "http://localhost?x",
            "http://localhost#f",
            "http://user@localhost",
            "http://localhost:",
            "http://localhost:65536",
            "http://localhost:123456",
            "http://localhost:+80",
            "ws://localhost",
            "file://localhost",
            "localhost:3000",
            "http://127.0.0.2",
            "http://[::1",
            "http://[::2]:80",
            "http://0.0.0.0",
            "http://evil.example",
            "null",
            "",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }

    #[test]
    fn origin_rules_follow_the_spec_order() {
        let configured = vec!["http://devbox.lan:5173".to_owned()];
        assert!(origin_allowed(&[], &configured), "absent");
        assert!(origin_allowed(&["http://localhost:3000"], &configured));
        assert!(origin_allowed(&["https://127.0.0.1"], &configured));
        assert!(origin_allowed(&["http://devbox.lan:5173"], &configured));
        assert!(origin_allowed(&["HTTP://DevBox.LAN:5173"], &configured));
        assert!(!origin_allowed(&["http://devbox.lan:5174"], &configured));
        assert!(!origin_allowed(&["http://devbox.lan:5173/"], &configured));
        assert!(!origin_allowed(&["null"], &configured));
        assert!(!origin_allowed(&["null"], &["null".to_owned()]));
        assert!(!origin_allowed(&["https://evil.example"], &configured));
        assert!(!origin_allowed(
            &["http://localhost.evil.example"],
            &configured
        ));
        assert!(
            !origin_allowed(
                &["http://localhost:3000", "http://localhost:3000"],
                &configured
            ),
            "two Origin headers"
        );
        assert!(!origin_allowed(&["http://devbox.lan:5173"], &[]));
    }

    #[test]
    fn web_upgrade_checks_run_in_order() {
        let web = policy(&["http://devbox.lan:5173"]);
        let web = Some(&web);
        assert!(check_upgrade(&request(&[]), web).is_ok());
        assert!(check_upgrade(&request(&[("Origin", "http://localhost:3000")]), web).is_ok());
        assert!(check_upgrade(&request(&[("Origin", "http://devbox.lan:5173")]), web).is_ok());
        // A subprotocol offer does not change the verdict (and is never selected).
        assert!(check_upgrade(&request(&[("Sec-WebSocket-Protocol", "appduct")]), web).is_ok());
        // `Connection` is a token list; `Upgrade` is compared case-insensitively.
        let listed = with(request(&[]), header::CONNECTION, "keep-alive, Upgrade");
        assert!(check_upgrade(&listed, web).is_ok());
        let upper = with(request(&[]), header::UPGRADE, "WebSocket");
        assert!(check_upgrade(&upper, web).is_ok());

        // Step 1 before everything else: a plain GET with a bad Host and Origin is a 426.
        let plain = without(
            without(request(&[("Origin", "null")]), header::UPGRADE),
            header::CONNECTION,
        );
        let plain = with(plain, header::HOST, "evil.example");
        assert_eq!(check_upgrade(&plain, web), Err(Rejection::NotUpgrade));
        let post = {
            let mut r = request(&[]);
            *r.method_mut() = http::Method::POST;
            r
        };
        assert_eq!(check_upgrade(&post, web), Err(Rejection::NotUpgrade));
        let http10 = {
            let mut r = request(&[]);
            *r.version_mut() = http::Version::HTTP_10;
            r
        };
        assert_eq!(check_upgrade(&http10, web), Err(Rejection::NotUpgrade));
        let no_connection_token = with(request(&[]), header::CONNECTION, "keep-alive");
        assert_eq!(
            check_upgrade(&no_connection_token, web),
            Err(Rejection::NotUpgrade)
        );
        let wrong_upgrade = with(request(&[]), header::UPGRADE, "h2c");
        assert_eq!(
            check_upgrade(&wrong_upgrade, web),
            Err(Rejection::NotUpgrade)
        );

        // Step 2 before step 3.
        let bad_host = with(
            request(&[("Origin", "null")]),
            header::HOST,
            "evil.example:41234",
        );
        assert_eq!(check_upgrade(&bad_host, web), Err(Rejection::Host));
        assert_eq!(
            check_upgrade(&without(request(&[]), header::HOST), web),
            Err(Rejection::Host)
        );
        let two_hosts = request(&[("Host", "localhost:41234")]);
        assert_eq!(check_upgrade(&two_hosts, web), Err(Rejection::Host));

        // Step 3.
        for origin in [
            "null",
            "https://evil.example",
            "http://localhost.evil.example",
        ] {
            assert_eq!(
                check_upgrade(&request(&[("Origin", origin)]), web),
                Err(Rejection::Origin),
                "{origin}"
            );
        }
        let two_origins = request(&[
            ("Origin", "http://localhost:3000"),
            ("Origin", "http://localhost:3000"),
        ]);
        assert_eq!(check_upgrade(&two_origins, web), Err(Rejection::Origin));
        let mut opaque = request(&[]);
        opaque.headers_mut().insert(
            header::ORIGIN,
            HeaderValue::from_bytes(b"http://localhost:3000\xff").unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(check_upgrade(&opaque, web), Err(Rejection::Origin));

        // Then the RFC 6455 handshake fields.
        let old = with(
            request(&[("Origin", "null")]),
            header::SEC_WEBSOCKET_VERSION,
            "8",
        );
        assert_eq!(check_upgrade(&old, web), Err(Rejection::Origin));
        let old = with(request(&[]), header::SEC_WEBSOCKET_VERSION, "8");
        assert_eq!(check_upgrade(&old, web), Err(Rejection::Version));
        assert_eq!(
            check_upgrade(&without(request(&[]), header::SEC_WEBSOCKET_KEY), web),
            Err(Rejection::MissingKey)
        );
    }

    #[test]
    fn wss_upgrade_ignores_host_and_origin() {
        let any = with(
            request(&[("Origin", "https://evil.example"), ("Origin", "null")]),
            header::HOST,
            "192.168.1.20:8443",
        );
        assert!(check_upgrade(&any, None).is_ok());
        let plain = without(request(&[]), header::UPGRADE);
        assert_eq!(check_upgrade(&plain, None), Err(Rejection::NotUpgrade));
    }

    #[test]
    fn refusals_carry_the_required_status_and_headers() {
        assert_eq!(Rejection::NotUpgrade.status(), 426);
        assert!(
            Rejection::NotUpgrade
                .response()
                .starts_with("HTTP/1.1 426 Upgrade Required\r\n")
        );
        assert!(
            Rejection::NotUpgrade
                .response()
                .contains("\r\nUpgrade: websocket\r\n")
        );
        for r in [Rejection::Host, Rejection::Origin] {
            assert_eq!(r.status(), 403);
            assert!(r.response().starts_with("HTTP/1.1 403 Forbidden\r\n"));
        }
        assert!(
            Rejection::MissingKey
                .response()
                .starts_with("HTTP/1.1 400 ")
        );
        for r in [
            Rejection::NotUpgrade,
            Rejection::Host,
            Rejection::Origin,
            Rejection::Version,
            Rejection::MissingKey,
        ] {
            assert!(r.response().ends_with("\r\n\r\n"));
            assert!(
                r.response()
                    .starts_with(&format!("HTTP/1.1 {} ", r.status()))
            );
        }
    }

    #[test]
    fn transport_names() {
        assert_eq!(Transport::Native.as_str(), "native");
        assert_eq!(Transport::Web.as_str(), "web");
    }
}
