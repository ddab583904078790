//! One device connection as the session engine sees it (ARCHITECTURE.md#test-layers): a receiver of [`Incoming`]
//! items and a cloneable [`DeviceSender`] for outgoing text, pings, pongs and closes, plus
//! `terminate()`.
//!
//! Two implementations share these types: [`memory_device_pair`] (channels only, for socket-free
//! engine tests) and [`from_websocket`] (an adapter over any tungstenite `WebSocketStream`, TLS or
//! plain). Neither checks the 262144-byte message limit on text the engine receives; the engine
//! does that itself (§D6). Streams built with [`websocket_config`] also carry that limit inside
//! tungstenite, so nothing larger is ever buffered; the adapter reports such a refusal as
//! [`Incoming::TooBig`] and closes `1009 message_too_big` itself. A WebSocket protocol violation
//! (RFC 6455 §7.1.7) is answered by the adapter too, `1002 protocol_error` or `1007
//! invalid_payload`, and the engine reads `Ended(Closed)`. A connection made with
//! [`from_websocket_evictable`] is dropped at once when its pre-claim slot is evicted.
//!
//! Lifecycle contract, identical for both implementations:
//! - `close()` queues a close frame behind earlier messages; the transport then finishes the close
//!   handshake on its own and drops TCP at most `CLOSE_HANDSHAKE_WAIT_MS` after the close was
//!   queued, even when the peer never reads and the frame could not be written. Later sends fail.
//! - `terminate()` drops TCP at once, without a close frame, even while a write is blocked;
//!   [`DeviceReceiver::recv`] then yields `Ended(Terminated)` immediately.
//! - Dropping every `DeviceSender` clone without a close is a terminate.
//! - After `Ended(_)`, `recv` keeps returning the same end.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use appduct_protocol::close::CloseReason;
use appduct_protocol::limits;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};

use appduct_protocol::sealed::{
    self, Opened, SealedChannel, SealedError, SealedReceiver, SealedSender,
};

use crate::preclaim::Eviction;

/// Where a sealed app's randomness came from (shown in the session details).
pub use appduct_protocol::control::RngSource;

/// Items the engine has not consumed yet, per connection. When full, the adapter stops reading.
/// Kept small: each item may be a 256 KiB message, an unauthenticated peer needs only one (its
/// claim) and the engine consumes promptly after that, so this bounds what any peer can make the
/// daemon buffer (about four messages with the one being read and the one being handled).
pub const INCOMING_QUEUE: usize = 2;
/// Outgoing messages not yet written, per connection.
pub const OUTGOING_QUEUE: usize = 64;

/// One WebSocket message as received from an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireMessage {
    Text(String),
    /// A binary message; only its length is kept since the engine rejects it anyway.
    Binary(usize),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// A close frame: code (absent for an empty frame) and reason.
    Close(Option<u16>, String),
}

/// What the engine reads from a [`DeviceReceiver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Message(WireMessage),
    /// The WebSocket library refused a message larger than the limit before buffering it. The
    /// adapter is already closing with `1009 message_too_big`; the engine handles this exactly like
    /// an oversized text message (a further `close` is harmless).
    TooBig {
        size: usize,
    },
    /// The connection is gone; nothing follows.
    Ended(ConnectionEnd),
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// A close frame was sent or received, and the connection is now gone.
    Closed,
    /// The daemon terminated the connection (or dropped every sender) without a close frame.
    Terminated,
    /// The connection broke without a close frame: TCP reset or EOF, TLS error. (A WebSocket
    /// protocol violation is answered with a `1002`/`1007` close and ends `Closed`.)
    Lost(String),
    /// Writing failed; the transport tried `1011 send_failed` (best effort). Socket loss.
    WriteFailed(String),
}

/// Why an outgoing message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the device connection is closing or gone")]
    Closed,
    #[error("the outgoing queue of the device connection is full")]
    Full,
}

/// Commands from the engine to the transport.
#[derive(Debug)]
enum Outgoing {
    Text(String),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(CloseReason),
}

#[derive(Debug, Default)]
struct SendFlags {
    /// Text, pings and pongs are refused: a close was queued, or the engine took the socket
    /// away ([`DeviceSender::refuse_sends`]).
    refusing: bool,
    /// The first close claimed the single close frame; later closes are refused.
    close_started: bool,
}

#[derive(Debug)]
struct SenderShared {
    /// Set once by `terminate()`; closed when every sender is gone.
    terminated: watch::Sender<bool>,
    /// When the close frame was queued: the transport drops TCP one close wait later.
    close_queued_at: watch::Sender<Option<Instant>>,
    /// Checked and changed together with queueing, so a refusal is never overtaken.
    flags: Mutex<SendFlags>,
}

/// The sending half of a device connection. Clones share one queue, so keepalive and call code can
/// send concurrently; messages of one clone keep their order.
#[derive(Debug, Clone)]
pub struct DeviceSender {
    // Dropped before `shared`, so the queue is closed before the transport sees the senders gone.
    tx: mpsc::Sender<Outgoing>,
    shared: Arc<SenderShared>,
}

impl DeviceSender {
    fn flags(&self) -> MutexGuard<'_, SendFlags> {
        self.shared
            .flags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn is_terminated(&self) -> bool {
        *self.shared.terminated.borrow()
    }

    /// The flags, if messages may still be queued.
    fn open_flags(&self) -> Result<MutexGuard<'_, SendFlags>, SendError> {
        let flags = self.flags();
        if flags.refusing || self.is_terminated() {
            Err(SendError::Closed)
        } else {
            Ok(flags)
        }
    }

    async fn enqueue(&self, item: Outgoing) -> Result<(), SendError> {
        drop(self.open_flags()?);
        let permit = self.tx.reserve().await.map_err(|_| SendError::Closed)?;
        // Checked again when the message enters the queue: a close or refusal that came while
        // this send waited for room wins, so nothing is queued behind it.
        let _flags = self.open_flags()?;
        permit.send(item);
        Ok(())
    }

    fn try_enqueue(&self, item: Outgoing) -> Result<(), SendError> {
        let _flags = self.open_flags()?;
        self.tx.try_send(item).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full,
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        })
    }

    /// Queues a text message, waiting while the queue is full.
    pub async fn send_text(&self, text: String) -> Result<(), SendError> {
        self.enqueue(Outgoing::Text(text)).await
    }

    /// Queues a text message, or fails with [`SendError::Full`] at once.
    pub fn try_send_text(&self, text: String) -> Result<(), SendError> {
        self.try_enqueue(Outgoing::Text(text))
    }

    pub async fn ping(&self, payload: Vec<u8>) -> Result<(), SendError> {
        self.enqueue(Outgoing::Ping(payload)).await
    }

    /// Queues a ping without waiting; keepalive uses this so a stuck peer cannot block it.
    pub fn try_ping(&self, payload: Vec<u8>) -> Result<(), SendError> {
        self.try_enqueue(Outgoing::Ping(payload))
    }

    /// Queues a pong, for a transport that does not answer pings itself: the in-memory pair
    /// carries it, the tungstenite adapter drops it (tungstenite has answered already).
    pub async fn pong(&self, payload: Vec<u8>) -> Result<(), SendError> {
        self.enqueue(Outgoing::Pong(payload)).await
    }

    /// Queues a close frame behind earlier messages. Only the first close is sent; the transport
    /// finishes the handshake and drops TCP by itself, at most one close wait after this returns.
    pub async fn close(&self, reason: CloseReason) -> Result<(), SendError> {
        {
            let mut flags = self.flags();
            if flags.close_started || self.is_terminated() {
                return Err(SendError::Closed);
            }
            flags.close_started = true;
            flags.refusing = true;
        }
        self.tx
            .send(Outgoing::Close(reason))
            .await
            .map_err(|_| SendError::Closed)?;
        self.shared
            .close_queued_at
            .send_replace(Some(Instant::now()));
        Ok(())
    }

    /// Like [`close`](Self::close) without waiting; on `Full` nothing changes, so the caller may
    /// retry or terminate.
    pub fn try_close(&self, reason: CloseReason) -> Result<(), SendError> {
        let mut flags = self.flags();
        if flags.close_started || self.is_terminated() {
            return Err(SendError::Closed);
        }
        match self.tx.try_send(Outgoing::Close(reason)) {
            Ok(()) => {
                flags.close_started = true;
                flags.refusing = true;
                self.shared
                    .close_queued_at
                    .send_replace(Some(Instant::now()));
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(SendError::Full),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError::Closed),
        }
    }

    /// Refuses every later text, ping and pong at once, while the connection may still send its
    /// single close. The engine calls this under its lock when it takes the socket away, so no
    /// frame queued after that moment can precede the close.
    pub(crate) fn refuse_sends(&self) {
        self.flags().refusing = true;
    }

    /// Drops the connection now, without a close frame (keepalive failure, shutdown fallback).
    pub fn terminate(&self) {
        self.shared.terminated.send_replace(true);
    }

    /// Whether messages can still be queued: no close, no terminate, transport alive.
    pub fn is_open(&self) -> bool {
        self.open_flags().is_ok() && !self.tx.is_closed()
    }

    /// Resolves once the transport is gone or the connection was terminated.
    pub async fn closed(&self) {
        let mut terminated = self.shared.terminated.subscribe();
        tokio::select! {
            _ = self.tx.closed() => {}
            _ = wait_true(&mut terminated) => {}
        }
    }
}

/// The receiving half of a device connection.
#[derive(Debug)]
pub struct DeviceReceiver {
    rx: mpsc::Receiver<Incoming>,
    terminated: watch::Receiver<bool>,
    ended: Option<ConnectionEnd>,
}

impl DeviceReceiver {
    /// The next item. Cancel-safe, so it can sit in a `select!` with timers.
    pub async fn recv(&mut self) -> Incoming {
        if let Some(end) = &self.ended {
            return Incoming::Ended(end.clone());
        }
        let item = tokio::select! {
            biased;
            _ = wait_true(&mut self.terminated) => Incoming::Ended(ConnectionEnd::Terminated),
            item = self.rx.recv() => item.unwrap_or_else(|| {
                Incoming::Ended(ConnectionEnd::Lost("connection dropped".to_owned()))
            }),
        };
        if let Incoming::Ended(end) = &item {
            self.ended = Some(end.clone());
        }
        item
    }
}

/// What protects a connection's frames on the wire, as the engine needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Channel {
    /// Frames as WebSocket text: TLS (native), loopback (web), or the in-memory pair.
    #[default]
    Plain,
    /// The sealed transport (issue #23): frames travel inside Noise records; `rng` is what the
    /// app said about its randomness in handshake message 1.
    Sealed { rng: RngSource },
    /// The plain route of the wss port whose first message was text, not a handshake: only a
    /// `link_refused` frame is acceptable; a claim or resume here travelled in cleartext.
    Cleartext,
}

/// One device connection: both halves together.
#[derive(Debug)]
pub struct DeviceSocket {
    receiver: DeviceReceiver,
    sender: DeviceSender,
    channel: Channel,
}

impl DeviceSocket {
    fn new(rx: mpsc::Receiver<Incoming>, tx: mpsc::Sender<Outgoing>) -> Self {
        let (terminated, terminated_rx) = watch::channel(false);
        let shared = Arc::new(SenderShared {
            terminated,
            close_queued_at: watch::channel(None).0,
            flags: Mutex::new(SendFlags::default()),
        });
        Self {
            receiver: DeviceReceiver {
                rx,
                terminated: terminated_rx,
                ended: None,
            },
            sender: DeviceSender { tx, shared },
            channel: Channel::Plain,
        }
    }

    /// How this connection's frames are protected on the wire.
    pub fn channel(&self) -> Channel {
        self.channel
    }

    /// Marks the channel (adapters, and tests that play a sealed app in memory).
    pub fn with_channel(mut self, channel: Channel) -> Self {
        self.channel = channel;
        self
    }

    pub async fn recv(&mut self) -> Incoming {
        self.receiver.recv().await
    }

    pub fn sender(&self) -> &DeviceSender {
        &self.sender
    }

    pub fn split(self) -> (DeviceReceiver, DeviceSender) {
        (self.receiver, self.sender)
    }
}

/// Resolves when the flag is set or its sender is gone: nobody is left to clear it, and a task
/// waiting on it must not outlive its owner.
pub(crate) async fn flag_set(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|set| *set).await;
}

/// Resolves only when the flag is set; never if its sender is dropped first.
async fn wait_true(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}

// ---------------------------------------------------------------------------------------------
// In-memory pair
// ---------------------------------------------------------------------------------------------

/// A connected pair: the daemon side and a test handle playing the app.
pub fn memory_device_pair() -> (DeviceSocket, MemoryApp) {
    let (in_tx, in_rx) = mpsc::channel(INCOMING_QUEUE);
    let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
    let socket = DeviceSocket::new(in_rx, out_tx);
    let app = MemoryApp {
        to_daemon: Some(in_tx),
        from_daemon: out_rx,
        terminated: socket.sender.shared.terminated.subscribe(),
        close_seen: false,
    };
    (socket, app)
}

/// What the app side of a memory pair observes from the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppEvent {
    Text(String),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close {
        code: u16,
        reason: String,
    },
    /// The daemon called `terminate()` before any close frame: TCP dropped without one.
    Terminated,
    /// The daemon let go of the connection after its close frame (dropped every sender or
    /// terminated it: the normal end), or dropped every sender without a close (like a
    /// terminate).
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the connection to the daemon is gone")]
pub struct AppDisconnected;

/// The app end of [`memory_device_pair`], for tests.
#[derive(Debug)]
pub struct MemoryApp {
    to_daemon: Option<mpsc::Sender<Incoming>>,
    from_daemon: mpsc::Receiver<Outgoing>,
    terminated: watch::Receiver<bool>,
    /// The daemon's close frame was received; dropping the connection after it is the normal end.
    close_seen: bool,
}

impl MemoryApp {
    /// Delivers any item to the daemon side, e.g. `Incoming::TooBig` or a write failure.
    pub async fn inject(&self, item: Incoming) -> Result<(), AppDisconnected> {
        if *self.terminated.borrow() {
            return Err(AppDisconnected);
        }
        let tx = self.to_daemon.as_ref().ok_or(AppDisconnected)?;
        tx.send(item).await.map_err(|_| AppDisconnected)
    }

    pub async fn send(&self, message: WireMessage) -> Result<(), AppDisconnected> {
        self.inject(Incoming::Message(message)).await
    }

    pub async fn send_text(&self, text: impl Into<String>) -> Result<(), AppDisconnected> {
        self.send(WireMessage::Text(text.into())).await
    }

    pub async fn send_binary(&self, len: usize) -> Result<(), AppDisconnected> {
        self.send(WireMessage::Binary(len)).await
    }

    pub async fn ping(&self, payload: impl Into<Vec<u8>>) -> Result<(), AppDisconnected> {
        self.send(WireMessage::Ping(payload.into())).await
    }

    pub async fn pong(&self, payload: impl Into<Vec<u8>>) -> Result<(), AppDisconnected> {
        self.send(WireMessage::Pong(payload.into())).await
    }

    /// Sends a close frame and ends the connection, as the adapter reports a peer close.
    pub async fn close(&mut self, code: Option<u16>, reason: &str) -> Result<(), AppDisconnected> {
        self.send(WireMessage::Close(code, reason.to_owned()))
            .await?;
        let sent = self.inject(Incoming::Ended(ConnectionEnd::Closed)).await;
        self.to_daemon = None;
        sent
    }

    /// Drops the connection without a close frame; the daemon side reads `Ended(Lost(_))`.
    pub fn drop_connection(&mut self) {
        self.to_daemon = None;
    }

    fn map(&mut self, out: Option<Outgoing>) -> AppEvent {
        match out {
            Some(Outgoing::Text(text)) => AppEvent::Text(text),
            Some(Outgoing::Ping(payload)) => AppEvent::Ping(payload),
            Some(Outgoing::Pong(payload)) => AppEvent::Pong(payload),
            Some(Outgoing::Close(reason)) => {
                self.close_seen = true;
                AppEvent::Close {
                    code: reason.code(),
                    reason: reason.reason().to_owned(),
                }
            }
            None if *self.terminated.borrow() => self.dropped(),
            None => AppEvent::Gone,
        }
    }

    /// What a terminate looks like from here.
    fn dropped(&self) -> AppEvent {
        if self.close_seen {
            AppEvent::Gone
        } else {
            AppEvent::Terminated
        }
    }

    /// The next thing the daemon did. Messages queued before a terminate are still reported
    /// first, then `Terminated` (repeatedly).
    pub async fn recv(&mut self) -> AppEvent {
        let out = tokio::select! {
            biased;
            out = self.from_daemon.recv() => out,
            _ = wait_true(&mut self.terminated) => return self.dropped(),
        };
        self.map(out)
    }

    /// Like [`recv`](Self::recv) without waiting: `None` when nothing happened yet.
    pub fn try_recv(&mut self) -> Option<AppEvent> {
        match self.from_daemon.try_recv() {
            Ok(out) => Some(self.map(Some(out))),
            Err(mpsc::error::TryRecvError::Disconnected) => Some(self.map(None)),
            Err(mpsc::error::TryRecvError::Empty) => {
                (*self.terminated.borrow()).then(|| self.dropped())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tungstenite adapter
// ---------------------------------------------------------------------------------------------

/// tungstenite's read buffer per connection, allocated up front. It grows to hold the largest
/// frame received (typically the registry snapshot) and never shrinks, and its free part is
/// zeroed before every read: the 128 KiB default would cost 128 KiB per session and a 128 KiB
/// memset per read. Device frames are small; a larger one grows the buffer once.
pub const READ_BUFFER_BYTES: usize = 1024;

/// WebSocket settings for device connections: message and frame size capped at the protocol
/// limit (§D6), so an oversized message is refused before it is buffered.
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(limits::MAX_MESSAGE_BYTES))
        .max_frame_size(Some(limits::MAX_MESSAGE_BYTES))
}

/// Wraps an open server-side WebSocket (built with [`websocket_config`]) into a [`DeviceSocket`].
/// Spawns one task on the current tokio runtime that owns the connection until it ends.
pub fn from_websocket<S>(ws: WebSocketStream<S>) -> DeviceSocket
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    from_websocket_evictable(ws, Eviction::never())
}

/// [`from_websocket`] for a connection holding a pre-claim slot: an eviction before the first
/// message drops TCP at once (the engine reads `Ended(Terminated)`), and delivering the first
/// message other than a ping or pong protects the connection from eviction.
pub fn from_websocket_evictable<S>(ws: WebSocketStream<S>, eviction: Eviction) -> DeviceSocket
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    spawn_adapter(ws, eviction, Codec::Plain, None)
}

/// Most bytes tungstenite may hold unwritten for one plain-route connection. Before message 1
/// the listener only reads, and tungstenite answers every ping itself; with its default (no
/// limit) a client that floods pings and never reads made the daemon queue every pong: ~900 MB
/// from one connection in 4 s (hostile-peer run, issue #23). At the limit a pong waits (only the
/// latest is kept) instead of growing the buffer. The sealed adapter writes one record (at most
/// 65,535 bytes) at a time and waits for the socket, so legitimate traffic stays far below it.
pub const PLAIN_ROUTE_MAX_UNWRITTEN_BYTES: usize = 1024 * 1024;

/// WebSocket settings of the wss port's plain route (issue #23): a message is one sealed
/// record at most, so anything over 65,535 bytes is refused unbuffered (`1009
/// message_too_big`). A `link_refused` text frame fits easily. Unwritten bytes are bounded by
/// [`PLAIN_ROUTE_MAX_UNWRITTEN_BYTES`].
pub fn plain_route_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(sealed::MAX_RECORD_BYTES))
        .max_frame_size(Some(sealed::MAX_RECORD_BYTES))
        .max_write_buffer_size(PLAIN_ROUTE_MAX_UNWRITTEN_BYTES)
}

/// The plain route after a completed handshake (the listener read message 1 and wrote message
/// 2): incoming records are opened into text frames and outgoing text is sealed into records;
/// a close from the engine goes out as a close record, then the WebSocket close.
pub fn from_sealed_websocket<S>(
    ws: WebSocketStream<S>,
    channel: SealedChannel,
    rng: RngSource,
    eviction: Eviction,
) -> DeviceSocket
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = channel.split();
    let codec = Codec::Sealed(SealedCodec {
        rx: Mutex::new(rx),
        tx: Mutex::new(tx),
    });
    spawn_adapter(ws, eviction, codec, None).with_channel(Channel::Sealed { rng })
}

/// The plain route when its first message was `first`, a text message (no handshake): that
/// message is delivered first, then the connection works like the web listener's.
pub fn from_plain_route_text<S>(
    ws: WebSocketStream<S>,
    first: String,
    eviction: Eviction,
) -> DeviceSocket
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    spawn_adapter(
        ws,
        eviction,
        Codec::Plain,
        Some(Message::Text(first.into())),
    )
    .with_channel(Channel::Cleartext)
}

fn spawn_adapter<S>(
    ws: WebSocketStream<S>,
    eviction: Eviction,
    codec: Codec,
    first: Option<Message>,
) -> DeviceSocket
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (in_tx, in_rx) = mpsc::channel(INCOMING_QUEUE);
    let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
    let socket = DeviceSocket::new(in_rx, out_tx);
    let drop_signals = DropSignals {
        terminated: socket.sender.shared.terminated.subscribe(),
        close_queued_at: socket.sender.shared.close_queued_at.subscribe(),
    };
    // Split before spawning: the task then holds two pointers to the stream, not the stream
    // itself (a future keeps its arguments for its whole life, and every idle connection keeps
    // its task).
    let (sink, stream) = ws.split();
    tokio::spawn(drive(
        sink,
        stream,
        in_tx,
        out_rx,
        drop_signals,
        eviction,
        Box::new(codec),
        first,
    ));
    socket
}

/// How WebSocket messages map to and from the engine's text frames.
enum Codec {
    /// One text message per frame (native, web).
    Plain,
    /// One or more sealed records per frame (issue #23).
    Sealed(SealedCodec),
}

/// Both halves of an established sealed channel. The reader opens with `rx`; the writer, and
/// the driver's final close after both halves stopped, seal with `tx`. Neither lock is held
/// across an await.
struct SealedCodec {
    rx: Mutex<SealedReceiver>,
    tx: Mutex<SealedSender>,
}

/// Why an incoming message breaks the sealed channel: the close to send, and whether a close
/// record can still precede it.
#[derive(Debug)]
struct SealedFault {
    error: SealedError,
}

impl Codec {
    /// Turns a received message into what the engine sees: `Ok(None)` for a fragment record
    /// with more to come. Pings, pongs and close frames pass through.
    fn incoming(
        &self,
        message: Message,
        record_closed: &mut bool,
    ) -> Result<Option<Message>, SealedFault> {
        let Codec::Sealed(codec) = self else {
            return Ok(Some(message));
        };
        let mut rx = codec.rx.lock().unwrap_or_else(PoisonError::into_inner);
        match message {
            Message::Binary(record) => match rx.open_record(&record) {
                Ok(None) => Ok(None),
                Ok(Some(Opened::Frame(text))) => Ok(Some(Message::Text(text.into()))),
                Ok(Some(Opened::Close { code, reason })) => {
                    *record_closed = true;
                    Ok(Some(Message::Close(Some(CloseFrame {
                        code: CloseCode::from(code),
                        reason: reason.into(),
                    }))))
                }
                Err(error) => Err(SealedFault { error }),
            },
            Message::Text(_) => Err(SealedFault {
                error: rx.text_message(),
            }),
            // A WebSocket close is not authenticated: after a close record it only ends the
            // connection; without one it tells the engine nothing but that the peer left.
            Message::Close(_) if *record_closed => Ok(None),
            Message::Close(_) => Ok(Some(Message::Close(None))),
            other => Ok(Some(other)),
        }
    }

    /// The WebSocket messages of one outgoing command: a text frame becomes its records, a
    /// close becomes a close record and the close frame.
    fn outgoing(&self, command: Outgoing) -> Result<Vec<Message>, SealedError> {
        let Codec::Sealed(codec) = self else {
            return Ok(vec![message_of(command)]);
        };
        let mut tx = codec.tx.lock().unwrap_or_else(PoisonError::into_inner);
        match command {
            Outgoing::Text(text) => Ok(tx
                .seal_frame(&text)?
                .into_iter()
                .map(|record| Message::Binary(record.into()))
                .collect()),
            Outgoing::Close(reason) => {
                // The code and reason travel only in the close record: the WebSocket close after
                // it is a bare 1000, so a passive observer learns nothing from it.
                Ok(match tx.seal_close(reason.code(), reason.reason()) {
                    Ok(record) => vec![Message::Binary(record.into()), bare_close_frame()],
                    Err(_) => vec![close_frame(reason)],
                })
            }
            other => Ok(vec![message_of(other)]),
        }
    }

    /// The close that ends the connection after a read failure, preceded by a close record
    /// when the channel can still seal one.
    fn closing(&self, reason: CloseReason, record: bool) -> Vec<Message> {
        match self {
            Codec::Sealed(_) if record => self
                .outgoing(Outgoing::Close(reason))
                .unwrap_or_else(|_| vec![close_frame(reason)]),
            _ => vec![close_frame(reason)],
        }
    }
}

/// What tells the transport to drop TCP regardless of what its halves are doing.
struct DropSignals {
    terminated: watch::Receiver<bool>,
    close_queued_at: watch::Receiver<Option<Instant>>,
}

impl DropSignals {
    /// Resolves when TCP must be dropped now: `Terminated` on `terminate()` or when every sender
    /// is gone without a close; `Closed` once the close wait, counted from when the close was
    /// queued, has run out (§D6). Neither waits for a write, so a peer that never reads cannot
    /// keep the connection.
    async fn must_drop(mut self) -> ConnectionEnd {
        let queued_at = loop {
            if let Some(at) = *self.close_queued_at.borrow_and_update() {
                break at;
            }
            tokio::select! {
                _ = flag_set(&mut self.terminated) => {
                    // Set, or every sender dropped; a close queued just before keeps its wait.
                    match *self.close_queued_at.borrow() {
                        Some(at) if !*self.terminated.borrow() => break at,
                        _ => return ConnectionEnd::Terminated,
                    }
                }
                changed = self.close_queued_at.changed() => {
                    if changed.is_err() {
                        // Every sender is gone.
                        match *self.close_queued_at.borrow() {
                            Some(at) => break at,
                            None => return ConnectionEnd::Terminated,
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = wait_true(&mut self.terminated) => ConnectionEnd::Terminated,
            _ = tokio::time::sleep_until(queued_at + close_wait()) => ConnectionEnd::Closed,
        }
    }
}

/// Signals shared by the read and write halves of one adapted connection.
struct Control {
    /// Either half ended: the other one stops too.
    stop: watch::Sender<bool>,
    /// The reader saw a ping or close; the writer flushes tungstenite's automatic reply at once,
    /// so pongs never wait for the engine (§D6).
    flush: Notify,
}

#[derive(Debug)]
enum ReadEnd {
    Halted,
    PeerClosed,
    TooBig,
    /// The peer broke RFC 6455; the driver answers with this close (RFC 6455 §7.1.7) before dropping TCP.
    Violation(CloseReason, String),
    /// A sealed record or message broke the sealed channel (issue #23).
    Sealed(SealedFault),
    Lost(String),
}

/// The close that answers a read error, when the error is the peer breaking RFC 6455 rather
/// than the transport failing: `1007 invalid_payload` for text that is not UTF-8, `1002
/// protocol_error` for framing violations (project decision: the appduct v2 close table has no row for
/// them, so the RFC's codes apply).
fn violation_close(error: &tungstenite::Error) -> Option<CloseReason> {
    match error {
        tungstenite::Error::Utf8 => Some(CloseReason::InvalidPayload),
        tungstenite::Error::Protocol(
            ProtocolError::NonZeroReservedBits
            | ProtocolError::UnmaskedFrameFromClient
            | ProtocolError::FragmentedControlFrame
            | ProtocolError::ControlFrameTooBig
            | ProtocolError::UnknownControlFrameType(_)
            | ProtocolError::UnknownDataFrameType(_)
            | ProtocolError::UnexpectedContinueFrame
            | ProtocolError::ExpectedFragment(_)
            | ProtocolError::InvalidOpcode(_)
            | ProtocolError::InvalidCloseSequence,
        ) => Some(CloseReason::ProtocolError),
        _ => None,
    }
}

#[derive(Debug)]
enum WriteEnd {
    Halted,
    /// Every `DeviceSender` was dropped without a close.
    SenderGone,
    /// A close frame was written and the peer's close arrived (or the reader ended).
    CloseSent,
    Failed(String),
}

fn close_frame(reason: CloseReason) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(reason.code()),
        reason: reason.reason().into(),
    }))
}

/// The WebSocket close that follows a close record: `1000` with an empty reason.
fn bare_close_frame() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

fn close_wait() -> Duration {
    Duration::from_millis(limits::CLOSE_HANDSHAKE_WAIT_MS)
}

#[allow(clippy::too_many_arguments)]
async fn drive<S>(
    sink: WsWrite<S>,
    stream: WsRead<S>,
    in_tx: mpsc::Sender<Incoming>,
    out_rx: mpsc::Receiver<Outgoing>,
    drop_signals: DropSignals,
    eviction: Eviction,
    codec: Box<Codec>,
    first: Option<Message>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Whichever finishes first drops the other; losing `transport` drops the stream (TCP).
    let end = tokio::select! {
        biased;
        end = drop_signals.must_drop() => end,
        _ = eviction.evicted() => ConnectionEnd::Terminated,
        end = transport(sink, stream, &in_tx, out_rx, &eviction, &codec, first) => end,
    };
    let _ = in_tx.send(Incoming::Ended(end)).await;
}

/// Runs both halves until the connection ends on its own, then finishes a pending close.
async fn transport<S>(
    sink: WsWrite<S>,
    stream: WsRead<S>,
    in_tx: &mpsc::Sender<Incoming>,
    out_rx: mpsc::Receiver<Outgoing>,
    eviction: &Eviction,
    codec: &Codec,
    first: Option<Message>,
) -> ConnectionEnd
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let control = Control {
        stop: watch::channel(false).0,
        flush: Notify::new(),
    };
    let ((stream, read_end), (sink, write_end)) = tokio::join!(
        read_half(stream, in_tx.clone(), &control, eviction, codec, first),
        write_half(sink, out_rx, &control, codec),
    );
    // The ending holds the whole stream by value and may linger: boxed, so its room is taken
    // only while a connection ends rather than in the task of every open connection.
    Box::pin(finish(
        stream.reunite(sink).ok(),
        read_end,
        write_end,
        codec,
    ))
    .await
}

/// How the connection ended, after sending the close a failed write or an oversized message
/// calls for.
async fn finish<S>(
    mut ws: Option<WebSocketStream<S>>,
    read_end: ReadEnd,
    write_end: WriteEnd,
    codec: &Codec,
) -> ConnectionEnd
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match (read_end, write_end) {
        (_, WriteEnd::Failed(detail)) => {
            if let Some(ws) = ws.as_mut() {
                let _ = tokio::time::timeout(
                    close_wait(),
                    ws.send(close_frame(CloseReason::SendFailed)),
                )
                .await;
            }
            ConnectionEnd::WriteFailed(detail)
        }
        (ReadEnd::TooBig, _) => {
            if let Some(ws) = ws.as_mut() {
                let closing = codec.closing(CloseReason::MessageTooBig, true);
                close_after_read_error(ws, closing).await;
            }
            ConnectionEnd::Closed
        }
        (ReadEnd::Violation(reason, detail), _) => {
            tracing::debug!("device connection broke RFC 6455 ({detail}); closing {reason}");
            if let Some(ws) = ws.as_mut() {
                close_after_read_error(ws, codec.closing(reason, true)).await;
            }
            ConnectionEnd::Closed
        }
        (ReadEnd::Sealed(fault), _) => {
            let reason = fault.error.close_reason();
            tracing::debug!(
                "sealed device connection failed ({}); closing {reason}",
                fault.error
            );
            if let Some(ws) = ws.as_mut() {
                let closing = codec.closing(reason, fault.error.sends_close_record());
                close_after_read_error(ws, closing).await;
            }
            ConnectionEnd::Closed
        }
        (ReadEnd::PeerClosed, _) | (_, WriteEnd::CloseSent) => ConnectionEnd::Closed,
        (_, WriteEnd::SenderGone) => ConnectionEnd::Terminated,
        (ReadEnd::Lost(detail), _) => ConnectionEnd::Lost(detail),
        (ReadEnd::Halted, WriteEnd::Halted) => ConnectionEnd::Lost("connection stopped".to_owned()),
    }
}

/// Sends `reason` after the reader stopped on an unreadable message, then lingers; both within
/// one close wait.
async fn close_after_read_error<S>(ws: &mut WebSocketStream<S>, closing: Vec<Message>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = Instant::now() + close_wait();
    let sent = tokio::time::timeout_at(deadline, async {
        for message in closing {
            ws.feed(message).await?;
        }
        ws.flush().await
    })
    .await;
    // `SendAfterClosing`: the engine's own close went out first.
    if matches!(
        sent,
        Ok(Ok(())
            | Err(tungstenite::Error::Protocol(
                ProtocolError::SendAfterClosing
            )))
    ) {
        linger(ws.get_mut(), deadline).await;
    }
}

/// After a close the peer may still be sending (an oversized message, typically): half-close and
/// discard its bytes until it closes or the deadline passes, so that dropping the socket with
/// unread data does not reset the connection before the peer has read our close frame.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, deadline: Instant) {
    let _ = tokio::time::timeout_at(deadline, async {
        let _ = stream.shutdown().await;
        let mut scratch = vec![0u8; 8192];
        while let Ok(n) = stream.read(&mut scratch).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

type WsRead<S> = SplitStream<WebSocketStream<S>>;
type WsWrite<S> = SplitSink<WebSocketStream<S>, Message>;

async fn read_half<S>(
    mut stream: WsRead<S>,
    in_tx: mpsc::Sender<Incoming>,
    control: &Control,
    eviction: &Eviction,
    codec: &Codec,
    first: Option<Message>,
) -> (WsRead<S>, ReadEnd)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let end = read_loop(&mut stream, &in_tx, control, eviction, codec, first).await;
    control.stop.send_replace(true);
    (stream, end)
}

async fn read_loop<S>(
    stream: &mut WsRead<S>,
    in_tx: &mpsc::Sender<Incoming>,
    control: &Control,
    eviction: &Eviction,
    codec: &Codec,
    mut first: Option<Message>,
) -> ReadEnd
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut halted = control.stop.subscribe();
    // A close record arrived: the channel's own close (sealed only).
    let mut record_closed = false;
    // Set once the first message that decides the pre-claim outcome went to the engine.
    let mut protected = false;
    let mut peer_closed = false;
    // False once the engine dropped its receiver: keep reading (close handshake) but discard.
    let mut deliver = true;
    loop {
        let next = match first.take() {
            Some(message) => Some(Ok(message)),
            None => tokio::select! {
                biased;
                _ = flag_set(&mut halted) => return ReadEnd::Halted,
                next = stream.next() => next,
            },
        };
        let next = match next {
            Some(Ok(message)) => match codec.incoming(message, &mut record_closed) {
                Ok(Some(message)) => Some(Ok(message)),
                Ok(None) => {
                    if record_closed {
                        // The WebSocket close after a close record: tungstenite answers it.
                        peer_closed = true;
                        control.flush.notify_one();
                    }
                    continue;
                }
                Err(fault) => return ReadEnd::Sealed(fault),
            },
            other => other,
        };
        let item = match next {
            Some(Ok(message)) => match message {
                Message::Text(text) => WireMessage::Text(text.as_str().to_owned()),
                Message::Binary(data) => WireMessage::Binary(data.len()),
                Message::Ping(payload) => {
                    control.flush.notify_one();
                    WireMessage::Ping(payload.to_vec())
                }
                Message::Pong(payload) => WireMessage::Pong(payload.to_vec()),
                Message::Close(frame) => {
                    peer_closed = true;
                    control.flush.notify_one();
                    match frame {
                        Some(frame) => WireMessage::Close(
                            Some(u16::from(frame.code)),
                            frame.reason.to_string(),
                        ),
                        None => WireMessage::Close(None, String::new()),
                    }
                }
                // Raw frames are only produced when writing.
                Message::Frame(_) => continue,
            },
            Some(Err(tungstenite::Error::Capacity(CapacityError::MessageTooLong {
                size, ..
            }))) => {
                // The stream cannot continue past a refused frame; the driver closes 1009.
                if !protected && !eviction.protect() {
                    return ReadEnd::Halted;
                }
                if deliver {
                    tokio::select! {
                        biased;
                        _ = flag_set(&mut halted) => {}
                        _ = in_tx.send(Incoming::TooBig { size }) => {}
                    }
                }
                return ReadEnd::TooBig;
            }
            None => {
                return if peer_closed {
                    ReadEnd::PeerClosed
                } else {
                    ReadEnd::Lost("connection closed without a close frame".to_owned())
                };
            }
            Some(Err(error)) => {
                return match violation_close(&error) {
                    Some(reason) => ReadEnd::Violation(reason, error.to_string()),
                    None => ReadEnd::Lost(error.to_string()),
                };
            }
        };
        if !protected && !matches!(item, WireMessage::Ping(_) | WireMessage::Pong(_)) {
            // An eviction that won the race drops this message with the connection.
            if !eviction.protect() {
                return ReadEnd::Halted;
            }
            protected = true;
        }
        if deliver {
            tokio::select! {
                biased;
                _ = flag_set(&mut halted) => return ReadEnd::Halted,
                permit = in_tx.reserve() => match permit {
                    Ok(permit) => permit.send(Incoming::Message(item)),
                    Err(_) => deliver = false,
                },
            }
        }
    }
}

async fn write_half<S>(
    mut sink: WsWrite<S>,
    mut out_rx: mpsc::Receiver<Outgoing>,
    control: &Control,
    codec: &Codec,
) -> (WsWrite<S>, WriteEnd)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let end = write_loop(&mut sink, &mut out_rx, control, codec).await;
    control.stop.send_replace(true);
    (sink, end)
}

/// Errors after which writing stops quietly: the peer's close already ended the connection.
fn is_finished(error: &tungstenite::Error) -> bool {
    matches!(
        error,
        tungstenite::Error::ConnectionClosed
            | tungstenite::Error::AlreadyClosed
            | tungstenite::Error::Protocol(ProtocolError::SendAfterClosing)
    )
}

/// Most frames one flush of [`write_loop`] takes from the queue, so that a busy queue cannot
/// hold its first frame back indefinitely.
const WRITE_BATCH: usize = 32;

/// Queues the messages of one command in the sink, through the codec. A frame the sealed
/// channel cannot seal (nonce exhaustion, never in practice) fails the write.
async fn feed<S>(sink: &mut WsWrite<S>, codec: &Codec, command: Outgoing) -> tungstenite::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // tungstenite answered the peer's ping itself when it read it (the reader then wakes this
    // writer to flush that pong); the engine's own pong for the same ping would be a second
    // one (issue #24). The in-memory pair, which answers nothing by itself, still carries it.
    if matches!(command, Outgoing::Pong(_)) {
        return Ok(());
    }
    let messages = codec.outgoing(command).map_err(|e| {
        tungstenite::Error::Io(std::io::Error::other(format!("sealing failed: {e}")))
    })?;
    for message in messages {
        sink.feed(message).await?;
    }
    Ok(())
}

fn message_of(command: Outgoing) -> Message {
    match command {
        Outgoing::Text(text) => Message::Text(text.into()),
        Outgoing::Ping(payload) => Message::Ping(payload.into()),
        Outgoing::Pong(payload) => Message::Pong(payload.into()),
        Outgoing::Close(reason) => close_frame(reason),
    }
}

async fn write_loop<S>(
    sink: &mut WsWrite<S>,
    out_rx: &mut mpsc::Receiver<Outgoing>,
    control: &Control,
    codec: &Codec,
) -> WriteEnd
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut halted = control.stop.subscribe();
    loop {
        let command = tokio::select! {
            biased;
            _ = flag_set(&mut halted) => return WriteEnd::Halted,
            _ = control.flush.notified() => None,
            command = out_rx.recv() => match command {
                Some(command) => Some(command),
                None => return WriteEnd::SenderGone,
            },
        };
        let mut closing = matches!(command, Some(Outgoing::Close(_)));
        let written = tokio::select! {
            biased;
            _ = flag_set(&mut halted) => return WriteEnd::Halted,
            written = async {
                let Some(first) = command else {
                    return sink.flush().await;
                };
                // Everything already queued goes out in one flush: with several calls in flight
                // this is one TLS write and one syscall for many frames, not one each.
                feed(sink, codec, first).await?;
                let mut batched = 1;
                while !closing && batched < WRITE_BATCH {
                    let Ok(next) = out_rx.try_recv() else { break };
                    closing = matches!(next, Outgoing::Close(_));
                    feed(sink, codec, next).await?;
                    batched += 1;
                }
                sink.flush().await
            } => written,
        };
        match written {
            Ok(()) => {}
            Err(error) if is_finished(&error) => {}
            Err(error) => return WriteEnd::Failed(error.to_string()),
        }
        if closing {
            // Wait for the peer's close (the reader then stops us); the close deadline of
            // `DropSignals` bounds this wait.
            flag_set(&mut halted).await;
            return WriteEnd::CloseSent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};
    use tokio::io::{DuplexStream, ReadBuf};
    use tokio::time::timeout;
    use tokio_tungstenite::tungstenite::protocol::Role;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// Hostile-peer finding (issue #23): pings before message 1 on the plain route, never
    /// reading the pongs, grew the daemon by ~900 MB in 4 s because tungstenite's unwritten
    /// buffer had no limit. The plain route must keep one (and room for a whole record).
    #[test]
    fn the_plain_route_bounds_unwritten_bytes() {
        let config = plain_route_config();
        assert_eq!(
            config.max_write_buffer_size,
            PLAIN_ROUTE_MAX_UNWRITTEN_BYTES
        );
        assert!(
            config.max_write_buffer_size
                >= config.write_buffer_size + sealed::MAX_RECORD_BYTES + 14,
            "a whole record must still fit past the write buffer"
        );
    }

    const WAIT: Duration = Duration::from_secs(10);

    async fn recv(socket: &mut DeviceSocket) -> Result<Incoming, tokio::time::error::Elapsed> {
        timeout(WAIT, socket.recv()).await
    }

    async fn app_recv(app: &mut MemoryApp) -> Result<AppEvent, tokio::time::error::Elapsed> {
        timeout(WAIT, app.recv()).await
    }

    fn text(t: &str) -> Incoming {
        Incoming::Message(WireMessage::Text(t.to_owned()))
    }

    // ----- memory pair -----

    #[tokio::test]
    async fn memory_pair_carries_every_message_kind_both_ways() -> TestResult {
        let (mut socket, mut app) = memory_device_pair();
        // At most INCOMING_QUEUE items wait for the engine.
        app.send_text("{\"type\":\"session_claim\"}").await?;
        app.send_binary(7).await?;
        assert_eq!(
            futures_util::FutureExt::now_or_never(app.ping(b"x".to_vec())),
            None,
            "a third unread item was accepted"
        );
        assert_eq!(
            recv(&mut socket).await?,
            text("{\"type\":\"session_claim\"}")
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Binary(7))
        );
        app.ping(b"p".to_vec()).await?;
        app.pong(b"q".to_vec()).await?;
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Ping(b"p".to_vec()))
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Pong(b"q".to_vec()))
        );

        let sender = socket.sender().clone();
        sender.send_text("hello".to_owned()).await?;
        sender.ping(b"k".to_vec()).await?;
        sender.pong(b"r".to_vec()).await?;
        assert_eq!(
            app_recv(&mut app).await?,
            AppEvent::Text("hello".to_owned())
        );
        assert_eq!(app_recv(&mut app).await?, AppEvent::Ping(b"k".to_vec()));
        assert_eq!(app_recv(&mut app).await?, AppEvent::Pong(b"r".to_vec()));
        assert_eq!(app.try_recv(), None);
        Ok(())
    }

    #[tokio::test]
    async fn memory_close_is_observed_and_blocks_later_sends() -> TestResult {
        let (socket, mut app) = memory_device_pair();
        let sender = socket.sender().clone();
        sender.send_text("before".to_owned()).await?;
        sender.close(CloseReason::InvalidJson).await?;
        assert_eq!(
            sender.send_text("after".to_owned()).await,
            Err(SendError::Closed)
        );
        assert_eq!(
            sender.close(CloseReason::Revoked).await,
            Err(SendError::Closed)
        );
        assert!(!sender.is_open());
        assert_eq!(
            app_recv(&mut app).await?,
            AppEvent::Text("before".to_owned())
        );
        assert_eq!(
            app_recv(&mut app).await?,
            AppEvent::Close {
                code: 1008,
                reason: "invalid_json".to_owned()
            }
        );
        assert_eq!(app.try_recv(), None, "only one close frame is sent");
        drop(socket);
        drop(sender);
        assert_eq!(app_recv(&mut app).await?, AppEvent::Gone);
        Ok(())
    }

    #[tokio::test]
    async fn refused_sends_fail_at_once_and_the_close_still_goes_out() -> TestResult {
        let (socket, mut app) = memory_device_pair();
        let sender = socket.sender().clone();
        for i in 0..OUTGOING_QUEUE {
            sender.try_send_text(i.to_string())?;
        }
        // Waits for room: it passed the first check before the refusal.
        let late = tokio::spawn({
            let sender = sender.clone();
            async move { sender.send_text("late".to_owned()).await }
        });
        tokio::task::yield_now().await;
        sender.refuse_sends();
        assert_eq!(sender.try_send_text("x".to_owned()), Err(SendError::Closed));
        assert_eq!(sender.try_ping(Vec::new()), Err(SendError::Closed));
        assert!(!sender.is_open());
        let closing = tokio::spawn({
            let sender = sender.clone();
            async move { sender.close(CloseReason::SessionReplaced).await }
        });
        for i in 0..OUTGOING_QUEUE {
            assert_eq!(app_recv(&mut app).await?, AppEvent::Text(i.to_string()));
        }
        assert_eq!(
            app_recv(&mut app).await?,
            AppEvent::Close {
                code: 1000,
                reason: "session_replaced".to_owned()
            },
            "nothing queued after the refusal precedes the close"
        );
        assert_eq!(timeout(WAIT, late).await??, Err(SendError::Closed));
        timeout(WAIT, closing).await???;
        Ok(())
    }

    #[tokio::test]
    async fn memory_terminate_drops_without_close_on_both_sides() -> TestResult {
        let (mut socket, mut app) = memory_device_pair();
        app.send_text("queued").await?;
        socket.sender().terminate();
        assert_eq!(app_recv(&mut app).await?, AppEvent::Terminated);
        assert_eq!(app.try_recv(), Some(AppEvent::Terminated));
        assert_eq!(app.send_text("late").await, Err(AppDisconnected));
        // Termination wins over queued input: the engine must not act on it any more.
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Terminated)
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Terminated)
        );
        assert_eq!(
            socket.sender().send_text("x".to_owned()).await,
            Err(SendError::Closed)
        );
        timeout(WAIT, socket.sender().closed()).await?;
        Ok(())
    }

    #[tokio::test]
    async fn memory_app_close_then_end_is_sticky() -> TestResult {
        let (mut socket, mut app) = memory_device_pair();
        app.close(Some(1001), "app_backgrounded").await?;
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Close(
                Some(1001),
                "app_backgrounded".to_owned()
            ))
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        assert_eq!(app.send_text("late").await, Err(AppDisconnected));
        Ok(())
    }

    #[tokio::test]
    async fn memory_dropped_app_is_a_lost_connection() -> TestResult {
        let (mut socket, mut app) = memory_device_pair();
        app.inject(Incoming::TooBig { size: 300_000 }).await?;
        app.drop_connection();
        assert_eq!(recv(&mut socket).await?, Incoming::TooBig { size: 300_000 });
        assert!(matches!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Lost(_))
        ));

        let (socket, app) = memory_device_pair();
        drop(app);
        timeout(WAIT, socket.sender().closed()).await?;
        assert_eq!(
            socket.sender().send_text("x".to_owned()).await,
            Err(SendError::Closed)
        );
        Ok(())
    }

    #[tokio::test]
    async fn memory_queue_is_bounded() -> TestResult {
        let (socket, mut app) = memory_device_pair();
        let sender = socket.sender();
        for i in 0..OUTGOING_QUEUE {
            sender.try_send_text(i.to_string())?;
        }
        assert_eq!(
            sender.try_send_text("over".to_owned()),
            Err(SendError::Full)
        );
        assert_eq!(sender.try_ping(Vec::new()), Err(SendError::Full));
        assert_eq!(
            sender.try_close(CloseReason::InternalError),
            Err(SendError::Full)
        );
        assert_eq!(app_recv(&mut app).await?, AppEvent::Text("0".to_owned()));
        // A failed try_close leaves the connection closable.
        sender.try_close(CloseReason::InternalError)?;
        assert_eq!(
            sender.try_close(CloseReason::InternalError),
            Err(SendError::Closed)
        );
        Ok(())
    }

    // ----- tungstenite adapter over an in-process duplex stream -----

    async fn adapter_pair<S>(
        server: S,
        client: DuplexStream,
    ) -> (DeviceSocket, WebSocketStream<DuplexStream>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let server =
            WebSocketStream::from_raw_socket(server, Role::Server, Some(websocket_config())).await;
        let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        (from_websocket(server), client)
    }

    async fn duplex_pair() -> (DeviceSocket, WebSocketStream<DuplexStream>) {
        let (server, client) = tokio::io::duplex(1 << 20);
        adapter_pair(server, client).await
    }

    type ClientItem = Option<Result<Message, tungstenite::Error>>;

    async fn client_next(
        client: &mut WebSocketStream<DuplexStream>,
    ) -> Result<ClientItem, tokio::time::error::Elapsed> {
        timeout(WAIT, client.next()).await
    }

    /// The next message the client received; an error when the connection ended instead.
    async fn client_message(
        client: &mut WebSocketStream<DuplexStream>,
    ) -> Result<Message, Box<dyn std::error::Error>> {
        Ok(client_next(client).await?.ok_or("client stream ended")??)
    }

    #[tokio::test]
    async fn adapter_round_trips_text_and_reports_binary_length() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        client.send(Message::Text("{\"a\":1}".into())).await?;
        client.send(Message::Binary(vec![0u8; 12].into())).await?;
        assert_eq!(recv(&mut socket).await?, text("{\"a\":1}"));
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Binary(12))
        );
        socket.sender().send_text("{\"b\":2}".to_owned()).await?;
        assert_eq!(
            client_message(&mut client).await?,
            Message::Text("{\"b\":2}".into())
        );
        Ok(())
    }

    #[tokio::test]
    async fn adapter_answers_pings_while_the_engine_is_not_reading() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        client.send(Message::Ping(b"hb".to_vec().into())).await?;
        // The engine has not called recv yet; the pong still arrives.
        assert_eq!(
            client_message(&mut client).await?,
            Message::Pong(b"hb".to_vec().into())
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Ping(b"hb".to_vec()))
        );
        client.send(Message::Pong(b"k".to_vec().into())).await?;
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Pong(b"k".to_vec()))
        );
        socket.sender().ping(b"d".to_vec()).await?;
        assert_eq!(
            client_message(&mut client).await?,
            Message::Ping(b"d".to_vec().into())
        );
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn adapter_stops_reading_while_the_engine_holds_a_few_unread_messages() -> TestResult {
        let (server, client) = tokio::io::duplex(64 * 1024);
        let (mut socket, mut client) = adapter_pair(server, client).await;
        let big = "x".repeat(200 * 1024);
        let sent = timeout(Duration::from_secs(5), async {
            for _ in 0..5 {
                client.send(Message::Text(big.as_str().into())).await?;
            }
            Ok::<_, tungstenite::Error>(())
        })
        .await;
        assert!(
            sent.is_err(),
            "the adapter buffered five 200 KiB messages the engine has not read"
        );
        // Reading resumes as the engine consumes.
        let sending = tokio::spawn(async move {
            for _ in 0..5 {
                client.send(Message::Text("y".into())).await?;
            }
            Ok::<_, tungstenite::Error>(client)
        });
        let mut small = 0;
        while small < 5 {
            if recv(&mut socket).await? == text("y") {
                small += 1;
            }
        }
        timeout(WAIT, sending).await???;
        Ok(())
    }

    #[tokio::test]
    async fn adapter_accepts_the_limit_and_closes_1009_above_it() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        let at_limit = "x".repeat(limits::MAX_MESSAGE_BYTES);
        client.send(Message::Text(at_limit.clone().into())).await?;
        assert_eq!(recv(&mut socket).await?, text(&at_limit));

        client
            .send(Message::Text(
                "y".repeat(limits::MAX_MESSAGE_BYTES + 1).into(),
            ))
            .await?;
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::TooBig {
                size: limits::MAX_MESSAGE_BYTES + 1
            }
        );
        match client_next(&mut client).await? {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), 1009);
                assert_eq!(frame.reason.as_str(), "message_too_big");
            }
            other => panic!("expected close 1009, got {other:?}"),
        }
        // The daemon half-closed after its close frame; the client then goes away.
        assert!(client_next(&mut client).await?.is_none_or(|r| r.is_err()));
        drop(client);
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        Ok(())
    }

    #[tokio::test]
    async fn adapter_engine_close_completes_the_handshake() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        socket.sender().close(CloseReason::PreClaimTimeout).await?;
        match client_next(&mut client).await? {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), 1008);
                assert_eq!(frame.reason.as_str(), "pre_claim_timeout");
            }
            other => panic!("expected close 1008, got {other:?}"),
        }
        // The client's reading flushes its echo; the daemon then drops TCP.
        assert!(client_next(&mut client).await?.is_none_or(|r| r.is_err()));
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Close(
                Some(1008),
                "pre_claim_timeout".to_owned()
            ))
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn adapter_drops_tcp_one_second_after_an_unanswered_close() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        let started = Instant::now();
        socket.sender().close(CloseReason::Revoked).await?;
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        assert!(started.elapsed() >= Duration::from_millis(limits::CLOSE_HANDSHAKE_WAIT_MS));
        assert!(matches!(
            client_next(&mut client).await?,
            Some(Ok(Message::Close(Some(_))))
        ));
        assert!(client_next(&mut client).await?.is_none_or(|r| r.is_err()));
        Ok(())
    }

    /// Writes to the client end until the daemon side is gone; `Ok` once a write fails.
    async fn wait_dropped(client: &mut DuplexStream) -> Result<(), tokio::time::error::Elapsed> {
        timeout(WAIT, async {
            // A masked empty ping: valid input the daemon would otherwise answer.
            while client.write_all(&[0x89, 0x80, 0, 0, 0, 0]).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    /// A small transport buffer the client never reads stands in for full TCP buffers.
    async fn stalled_pair() -> (DeviceSocket, DuplexStream) {
        let (server, client) = tokio::io::duplex(64);
        let server =
            WebSocketStream::from_raw_socket(server, Role::Server, Some(websocket_config())).await;
        (from_websocket(server), client)
    }

    #[tokio::test(start_paused = true)]
    async fn adapter_drops_a_peer_that_never_reads_one_close_wait_after_the_close() -> TestResult {
        let (socket, mut client) = stalled_pair().await;
        let (mut receiver, sender) = socket.split();
        // The writer blocks on this message: the peer reads nothing.
        sender.send_text("x".repeat(4096)).await?;
        let started = Instant::now();
        sender.close(CloseReason::PreClaimTimeout).await?;
        // The engine lets go of the connection without terminating it.
        drop(sender);
        assert_eq!(
            timeout(WAIT, receiver.recv()).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        let waited = started.elapsed();
        assert!(waited >= close_wait(), "{waited:?}");
        assert!(waited < close_wait() * 2, "{waited:?}");
        wait_dropped(&mut client).await?;
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn adapter_terminate_wins_over_a_blocked_write() -> TestResult {
        let (mut socket, mut client) = stalled_pair().await;
        socket.sender().send_text("x".repeat(4096)).await?;
        let started = Instant::now();
        socket.sender().terminate();
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Terminated)
        );
        wait_dropped(&mut client).await?;
        assert!(started.elapsed() < close_wait(), "{:?}", started.elapsed());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn adapter_dropping_every_sender_wins_over_a_blocked_write() -> TestResult {
        let (socket, mut client) = stalled_pair().await;
        let (mut receiver, sender) = socket.split();
        sender.send_text("x".repeat(4096)).await?;
        let started = Instant::now();
        drop(sender);
        assert_eq!(
            timeout(WAIT, receiver.recv()).await?,
            Incoming::Ended(ConnectionEnd::Terminated)
        );
        wait_dropped(&mut client).await?;
        assert!(started.elapsed() < close_wait(), "{:?}", started.elapsed());
        Ok(())
    }

    #[tokio::test]
    async fn adapter_reports_a_peer_close() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        client
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::from(1001),
                reason: "app_backgrounded".into(),
            })))
            .await?;
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Message(WireMessage::Close(
                Some(1001),
                "app_backgrounded".to_owned()
            ))
        );
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Closed)
        );
        // The adapter echoed the close before dropping TCP.
        assert!(matches!(
            client_next(&mut client).await?,
            Some(Ok(Message::Close(Some(_))))
        ));
        Ok(())
    }

    #[tokio::test]
    async fn adapter_terminate_sends_no_close_frame() -> TestResult {
        let (mut socket, mut client) = duplex_pair().await;
        socket.sender().terminate();
        assert_eq!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Terminated)
        );
        let next = client_next(&mut client).await?;
        assert!(
            !matches!(next, Some(Ok(_))),
            "no frame after terminate: {next:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn adapter_dropping_every_sender_terminates() -> TestResult {
        let (socket, mut client) = duplex_pair().await;
        let (mut receiver, sender) = socket.split();
        drop(sender);
        assert_eq!(
            timeout(WAIT, receiver.recv()).await?,
            Incoming::Ended(ConnectionEnd::Terminated)
        );
        let next = client_next(&mut client).await?;
        assert!(
            !matches!(next, Some(Ok(_))),
            "no frame after the drop: {next:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn adapter_reports_a_vanished_peer_as_lost() -> TestResult {
        let (mut socket, client) = duplex_pair().await;
        drop(client);
        assert!(matches!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::Lost(_))
        ));
        timeout(WAIT, socket.sender().closed()).await?;
        Ok(())
    }

    /// A stream whose writes fail once `broken` is set, while reads stay pending.
    struct BreakableWrites {
        inner: DuplexStream,
        broken: Arc<AtomicBool>,
    }

    impl AsyncRead for BreakableWrites {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for BreakableWrites {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            if self.broken.load(Ordering::SeqCst) {
                return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
            }
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    #[tokio::test]
    async fn adapter_surfaces_a_write_failure() -> TestResult {
        let (server, client) = tokio::io::duplex(1 << 16);
        let broken = Arc::new(AtomicBool::new(false));
        let server = BreakableWrites {
            inner: server,
            broken: Arc::clone(&broken),
        };
        let (mut socket, _client) = adapter_pair(server, client).await;
        socket.sender().send_text("fine".to_owned()).await?;
        broken.store(true, Ordering::SeqCst);
        socket.sender().send_text("lost".to_owned()).await?;
        assert!(matches!(
            recv(&mut socket).await?,
            Incoming::Ended(ConnectionEnd::WriteFailed(_))
        ));
        timeout(WAIT, socket.sender().closed()).await?;
        Ok(())
    }
}
