//! The device listeners (02 §2, §8): `wss://` on `wssPort` and loopback `ws://` for web pages.
//!
//! Each accepted TCP connection takes a pre-claim slot from a [`PreclaimLimiter`] shared by both
//! listeners, or is closed at once without reading. Its pre-claim deadline starts at accept and
//! bounds the TLS handshake and the HTTP upgrade (TCP is dropped when it passes first). An opened
//! WebSocket is handed on as an [`AcceptedDevice`], together with its slot and deadline, for the
//! session engine to claim or close `1008 pre_claim_timeout`.
//!
//! The upgrade request head is read here (bounded) instead of inside tungstenite, because
//! tungstenite answers nothing to a non-upgrade request while the web listener must answer `426`,
//! and the checks must run in the order of 02 §2.2. The `101` never selects a subprotocol.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use appduct_protocol::limits;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::handshake::machine::TryParse;
use tokio_tungstenite::tungstenite::handshake::server::Request;
use tokio_tungstenite::tungstenite::http::{self, HeaderValue, header};
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::device_socket::{self, DeviceSocket};

/// Largest upgrade request head read before giving up on a connection.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
const LISTEN_BACKLOG: u32 = 1024;
/// Pause after a failed `accept` (e.g. out of descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// The listener a connection arrived on (02 §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Native,
    Web,
}

impl Transport {
    /// The wire name used by `link.create` and session records.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Web => "web",
        }
    }
}

/// Bounds the connections in the pre-claim stage across both listeners (02 §8).
#[derive(Debug, Clone)]
pub struct PreclaimLimiter {
    permits: Arc<Semaphore>,
    capacity: usize,
}

impl PreclaimLimiter {
    pub fn new(capacity: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// A slot, or `None` when every slot is taken.
    pub fn try_acquire(&self) -> Option<PreclaimSlot> {
        Arc::clone(&self.permits)
            .try_acquire_owned()
            .ok()
            .map(|permit| PreclaimSlot { _permit: permit })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots currently held.
    pub fn in_use(&self) -> usize {
        self.capacity
            .saturating_sub(self.permits.available_permits())
    }
}

impl Default for PreclaimLimiter {
    fn default() -> Self {
        Self::new(limits::MAX_PRECLAIM_CONNECTIONS)
    }
}

/// One pre-claim slot. The engine drops it once the claim or resume has been processed (or the
/// connection ends), which lets the next connection in.
#[derive(Debug)]
pub struct PreclaimSlot {
    _permit: OwnedSemaphorePermit,
}

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

/// What both listeners share.
#[derive(Debug, Clone)]
pub struct AcceptContext {
    pub preclaim: PreclaimLimiter,
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
    /// `webOrigins` from `config.json` (01 §5.2), already validated.
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

/// Binds the wss listener (02 §2.1): one dual-stack `[::]` socket with `IPV6_V6ONLY` off, or
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
        // wildcard (the loopback fast path of 02 §7 relies on it).
        let bound = listeners[0].local_addr()?.port();
        listeners.push(bind_v4(SocketAddr::from((Ipv4Addr::LOCALHOST, bound)))?);
    }
    Ok(listeners)
}

/// Binds the web listener on `127.0.0.1` with an OS-assigned port (02 §2.2).
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
    Wss(TlsAcceptor),
    Web(WebPolicy),
}

/// Starts the wss accept loops on listeners from [`bind_wss`].
pub fn serve_wss(
    listeners: Vec<TcpListener>,
    tls: Arc<rustls::ServerConfig>,
    ctx: AcceptContext,
) -> io::Result<RunningListener> {
    serve(listeners, Flavor::Wss(TlsAcceptor::from(tls)), ctx)
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

/// Resolves when the flag is set; never if its sender is dropped first.
async fn flag_set(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
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
        let Some(slot) = ctx.preclaim.try_acquire() else {
            tracing::debug!(%peer, "pre-claim limit reached; connection closed");
            drop(tcp);
            continue;
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
    let opened = tokio::select! {
        biased;
        _ = flag_set(&mut shutdown) => return,
        opened = tokio::time::timeout_at(claim_deadline, open(tcp, &flavor)) => opened,
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
}

async fn open(tcp: TcpStream, flavor: &Flavor) -> Result<(DeviceSocket, Transport), OpenError> {
    match flavor {
        Flavor::Wss(acceptor) => {
            let tls = acceptor.accept(tcp).await.map_err(OpenError::Tls)?;
            let ws = upgrade(tls, None).await?;
            Ok((device_socket::from_websocket(ws), Transport::Native))
        }
        Flavor::Web(policy) => {
            let ws = upgrade(tcp, Some(policy)).await?;
            Ok((device_socket::from_websocket(ws), Transport::Web))
        }
    }
}

/// Reads the request head, applies [`check_upgrade`], answers, and opens the WebSocket.
async fn upgrade<S>(mut stream: S, web: Option<&WebPolicy>) -> Result<WebSocketStream<S>, OpenError>
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
    Ok(WebSocketStream::from_partially_read(
        stream,
        tail,
        Role::Server,
        Some(device_socket::websocket_config()),
    )
    .await)
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
    /// Not a WebSocket upgrade: `426` with `Upgrade: websocket` (02 §2.2 step 1).
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

/// Applies the upgrade checks in the order of 02 §2.2 and returns the `Sec-WebSocket-Key`.
/// `web` is `None` on the wss listener, which checks neither `Host` nor `Origin` (02 §2.1).
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
/// case-insensitive (02 §2.2 step 2).
pub fn host_allowed(host: &str, web_port: u16) -> bool {
    let host = host.trim_matches([' ', '\t']);
    ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|name| host.eq_ignore_ascii_case(&format!("{name}:{web_port}")))
}

/// Every `Origin` value of a web upgrade, in order (02 §2.2 step 3): none is allowed, several
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
