//! The request side of one control connection: reads from the socket into the line framer,
//! holding little memory while the connection is idle (issue #20 defect 6).
//!
//! The daemon accepts any number of control connections (§C1.2) and closes none for being
//! idle (a client may keep one connection for many requests, the MCP bridge does), so what an
//! idle connection holds is what a same-user client can multiply. Reads start at
//! [`MIN_READ_BYTES`] and double while they fill the buffer, up to [`MAX_READ_BYTES`]; once no
//! partial line is buffered both buffers drop back to at most [`IDLE_READ_BYTES`] in total. A
//! request line still grows the framer up to the line cap (1 MiB), as before.

use std::io;

use appduct_protocol::jsonrpc::{LineBuffer, Overflow};
use tokio::io::{AsyncRead, AsyncReadExt};

/// First read size, and the read size again once the connection has no partial line.
pub const MIN_READ_BYTES: usize = 1024;
/// Largest single read while a long line arrives.
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// What a connection with no partial request line keeps in its read buffer and its framer
/// together, at most. The framer keeps up to this much capacity between requests so a client
/// sending small requests does not reallocate each time.
pub const IDLE_READ_BYTES: usize = MIN_READ_BYTES + IDLE_FRAMER_BYTES;
const IDLE_FRAMER_BYTES: usize = 3 * 1024;

#[derive(Debug)]
pub(crate) struct RequestReader {
    framer: LineBuffer,
    read_buf: Vec<u8>,
    read_size: usize,
}

impl RequestReader {
    /// `line_cap`: the longest request line accepted (§C2).
    pub(crate) fn new(line_cap: usize) -> Self {
        Self {
            framer: LineBuffer::new(line_cap),
            read_buf: Vec::new(),
            read_size: MIN_READ_BYTES,
        }
    }

    /// The next complete line, copied (tests).
    #[cfg(test)]
    pub(crate) fn next_line(&mut self) -> Option<Result<Vec<u8>, Overflow>> {
        self.next_line_span()
            .map(|line| line.map(|span| self.line(span).to_vec()))
    }

    /// The next complete line, as [`LineBuffer::next_line_span`]: where it lies in the
    /// framer's buffer, read with [`line`](Self::line) before the next read, so a request is
    /// parsed without a copy of its line (issue #24). When none is complete and nothing of a
    /// next one is buffered, the buffers shrink back to the idle size.
    pub(crate) fn next_line_span(&mut self) -> Option<Result<std::ops::Range<usize>, Overflow>> {
        let next = self.framer.next_line_span();
        if next.is_none() && self.framer.pending() == 0 {
            self.framer.release_idle(IDLE_FRAMER_BYTES);
            self.read_size = MIN_READ_BYTES;
            if self.read_buf.capacity() > MIN_READ_BYTES {
                self.read_buf = Vec::new();
            }
        }
        next
    }

    /// The bytes of a line [`next_line_span`](Self::next_line_span) returned.
    pub(crate) fn line(&self, span: std::ops::Range<usize>) -> &[u8] {
        self.framer.line(span)
    }

    /// Reads once from `reader` into the framer; `Ok(0)` at EOF. Cancel-safe: bytes are only
    /// taken from the socket when the read completes.
    pub(crate) async fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> io::Result<usize> {
        if self.read_buf.capacity() > self.read_size {
            self.read_buf = Vec::new();
        }
        self.read_buf.clear();
        self.read_buf.reserve_exact(self.read_size);
        let n = reader.read_buf(&mut self.read_buf).await?;
        self.framer.push(&self.read_buf[..n]);
        if n >= self.read_size {
            self.read_size = (self.read_size * 2).min(MAX_READ_BYTES);
        }
        Ok(n)
    }

    /// Bytes of buffer memory held now (capacities, not lengths).
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.framer.capacity() + self.read_buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Defect 6 of #20: a connection used to hold a 64 KiB read buffer from its first byte.
    /// Now a fresh one holds nothing, and after a request line of any size (up to the cap) is
    /// consumed the connection holds at most `IDLE_READ_BYTES`, also while its next read waits.
    #[tokio::test]
    async fn an_idle_connection_holds_at_most_idle_read_bytes() {
        let cap = 1_048_576;
        let mut reader = RequestReader::new(cap);
        assert_eq!(reader.held_bytes(), 0, "nothing before the first byte");

        let (mut client, mut server) = tokio::io::duplex(256 * 1024);
        // A small request, then one line exactly at the cap.
        let small = br#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#;
        let big = vec![b' '; cap];
        let writer = tokio::spawn(async move {
            client.write_all(small).await.unwrap();
            client.write_all(b"\n").await.unwrap();
            client.write_all(&big).await.unwrap();
            client.write_all(b"\n").await.unwrap();
            client
        });
        let mut lines = Vec::new();
        let mut peak = 0;
        while lines.len() < 2 {
            match reader.next_line() {
                Some(line) => lines.push(line.unwrap().len()),
                None => {
                    assert!(reader.read_from(&mut server).await.unwrap() > 0);
                    peak = peak.max(reader.held_bytes());
                }
            }
        }
        assert_eq!(lines, [small.len(), cap], "the line cap is unchanged");
        assert!(peak > cap, "a long line still grows the framer: {peak}");
        assert!(reader.next_line().is_none());
        assert!(
            reader.held_bytes() <= IDLE_READ_BYTES,
            "after the lines: {} bytes held",
            reader.held_bytes()
        );

        // The next read waits on an idle socket: what it holds meanwhile is the idle size.
        let mut client = writer.await.unwrap();
        let pending = async {
            tokio::task::yield_now().await;
            client.write_all(b"x\n").await.unwrap();
            client
        };
        let (read, _client) = tokio::join!(reader.read_from(&mut server), pending);
        assert_eq!(read.unwrap(), 2);
        assert!(
            reader.held_bytes() <= IDLE_READ_BYTES,
            "while reading an idle connection: {} bytes held",
            reader.held_bytes()
        );
        assert_eq!(reader.next_line().unwrap().unwrap(), b"x");
    }

    #[tokio::test]
    async fn reads_grow_while_a_long_line_arrives_and_overflow_is_kept() {
        let mut reader = RequestReader::new(100_000);
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        client.write_all(&vec![b'a'; 200_000]).await.unwrap();
        let mut sizes = Vec::new();
        loop {
            match reader.next_line() {
                Some(Err(Overflow { cap })) => {
                    assert_eq!(cap, 100_000);
                    break;
                }
                Some(Ok(_)) => panic!("no line was complete"),
                None => sizes.push(reader.read_from(&mut server).await.unwrap()),
            }
        }
        assert_eq!(sizes[0], MIN_READ_BYTES);
        assert!(sizes.iter().all(|&n| n <= MAX_READ_BYTES));
        assert!(sizes.contains(&MAX_READ_BYTES), "{sizes:?}");
    }
}
