//! A Unix stream that asks the event loop about write room only while a write waits for it.
//!
//! tokio registers a socket for read and write readiness at once (edge-triggered). On a Unix
//! socket the kernel signals "writable" every time the peer reads, so each response the client
//! reads wakes the daemon once more for nothing — on the one-call-at-a-time path that is an
//! extra wake-up and context switch per call. Here the stream is registered for reads only;
//! writes go straight to the socket, and only one that finds it full registers a duplicate
//! descriptor for write readiness, until it has written.

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// See the module documentation.
#[derive(Debug)]
pub struct QuietUnixStream {
    stream: AsyncFd<StdUnixStream>,
    /// A duplicate of the socket registered for write readiness, only while a write waits.
    write_wait: Option<AsyncFd<OwnedFd>>,
}

impl QuietUnixStream {
    /// Takes over `stream` (it must belong to the current runtime's reactor).
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<Self> {
        let stream = stream.into_std()?;
        stream.set_nonblocking(true)?;
        Ok(Self {
            stream: register(stream, Interest::READABLE)?,
            write_wait: None,
        })
    }
}

/// Registers an owned descriptor with the reactor for `interest`.
///
/// `AsyncFd::with_interest` is deprecated because a `T` whose `as_raw_fd` could change or close
/// would break the registration; its replacement is `unsafe`, which this workspace forbids. The
/// two types used here own their descriptor for their whole life and always report the same
/// one, which is the condition that replacement asks the caller to uphold.
#[allow(deprecated)]
fn register<T: std::os::fd::AsRawFd + OwnsItsFd>(
    owned: T,
    interest: Interest,
) -> io::Result<AsyncFd<T>> {
    AsyncFd::with_interest(owned, interest)
}

/// Types that own one descriptor for their whole life (see [`register`]).
trait OwnsItsFd {}
impl OwnsItsFd for StdUnixStream {}
impl OwnsItsFd for OwnedFd {}

fn retry(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
}

/// `send` with `MSG_NOSIGNAL`: a peer that is gone is an `EPIPE` error, never a `SIGPIPE`.
fn send(stream: &StdUnixStream, data: &[u8]) -> io::Result<usize> {
    rustix::net::send(stream, data, rustix::net::SendFlags::NOSIGNAL).map_err(io::Error::from)
}

impl AsyncRead for QuietUnixStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.stream.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            match guard.try_io(|s| s.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // A short read drained the socket: the next read waits for the next edge
                    // instead of finding out with an `EAGAIN` (as tokio's own streams do).
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if retry(&e) => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Would block: readiness is cleared, wait for the next edge.
                Err(_) => {}
            }
        }
    }
}

impl AsyncWrite for QuietUnixStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.write_wait.is_none() {
            loop {
                match send(this.stream.get_ref(), data) {
                    Ok(n) => return Poll::Ready(Ok(n)),
                    Err(e) if retry(&e) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            // Registering reports the socket's readiness at that moment, so room that appeared
            // since the failed write is not missed.
            let dup = this.stream.get_ref().as_fd().try_clone_to_owned()?;
            this.write_wait = Some(register(dup, Interest::WRITABLE)?);
        }
        let written = match &this.write_wait {
            Some(wait) => loop {
                let mut guard = ready!(wait.poll_write_ready(cx))?;
                match guard.try_io(|_| send(this.stream.get_ref(), data)) {
                    Ok(Err(e)) if retry(&e) => {}
                    Ok(result) => break result,
                    Err(_) => {}
                }
            },
            None => return Poll::Ready(Err(io::Error::other("no write registration"))),
        };
        // Written (or failed): stop hearing about write room.
        this.write_wait = None;
        Poll::Ready(written)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.stream.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::{Duration, timeout};

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn carries_bytes_both_ways_and_ends_on_shutdown() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let mut quiet = QuietUnixStream::new(a).unwrap();
        quiet.write_all(b"ping\n").await.unwrap();
        let mut got = [0u8; 5];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping\n");
        b.write_all(b"pong\n").await.unwrap();
        let mut back = [0u8; 5];
        timeout(WAIT, quiet.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&back, b"pong\n");
        quiet.shutdown().await.unwrap();
        let mut rest = Vec::new();
        b.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        drop(b);
        let mut after = [0u8; 1];
        assert_eq!(quiet.read(&mut after).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_write_to_a_full_socket_waits_for_room_and_then_completes() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let mut quiet = QuietUnixStream::new(a).unwrap();
        // Far more than a Unix socket buffers: the write must block, then finish as b reads.
        let payload: Vec<u8> = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let expected = payload.clone();
        let writer = tokio::spawn(async move {
            quiet.write_all(&payload).await.unwrap();
            quiet
        });
        let mut got = vec![0u8; expected.len()];
        timeout(WAIT, b.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == expected, "the bytes arrived in order and complete");
        let quiet = timeout(WAIT, writer).await.unwrap().unwrap();
        assert!(
            quiet.write_wait.is_none(),
            "write readiness is dropped once written"
        );
    }

    #[tokio::test]
    async fn a_peer_that_is_gone_fails_the_write() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let mut quiet = QuietUnixStream::new(a).unwrap();
        drop(b);
        let err = quiet.write_all(b"x").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
