//! Shared helpers of the real-socket listener tests.

#![allow(dead_code)]

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use appduct_daemon::listener::{AcceptContext, AcceptedDevice, PreclaimBudget};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::timeout;

pub type TestResult = Result<(), Box<dyn Error>>;

/// Upper bound for any single awaited event; never a synchronisation sleep.
pub const WAIT: Duration = Duration::from_secs(10);
/// Pre-claim timeout for tests that must not hit it.
pub const LONG: Duration = Duration::from_secs(600);

pub struct Harness {
    pub ctx: AcceptContext,
    pub devices: mpsc::Receiver<AcceptedDevice>,
    pub shutdown: watch::Sender<bool>,
}

pub fn harness(capacity: usize, pre_claim_timeout: Duration) -> Harness {
    let (accepted, devices) = mpsc::channel(16);
    let (shutdown, shutdown_rx) = watch::channel(false);
    Harness {
        ctx: AcceptContext {
            preclaim: PreclaimBudget::with_capacity(capacity),
            pre_claim_timeout,
            accepted,
            shutdown: shutdown_rx,
        },
        devices,
        shutdown,
    }
}

pub async fn next_device(
    devices: &mut mpsc::Receiver<AcceptedDevice>,
) -> Result<AcceptedDevice, Box<dyn Error>> {
    Ok(timeout(WAIT, devices.recv())
        .await?
        .ok_or("device channel closed")?)
}

/// Reads until the server closes: the bytes received, and whether it ended with a reset.
pub async fn read_until_closed(stream: &mut TcpStream) -> Result<(Vec<u8>, bool), Box<dyn Error>> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match timeout(WAIT, stream.read(&mut chunk)).await? {
            Ok(0) => return Ok((received, false)),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(_) => return Ok((received, true)),
        }
    }
}

/// Sends raw bytes and returns everything the server answers before closing.
pub async fn exchange(addr: SocketAddr, request: &str) -> Result<String, Box<dyn Error>> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let (received, _) = read_until_closed(&mut stream).await?;
    Ok(String::from_utf8(received)?)
}

/// Reads a response head (through the blank line) and leaves the connection open.
pub async fn read_head(stream: &mut TcpStream) -> Result<String, Box<dyn Error>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if timeout(WAIT, stream.read(&mut byte)).await?? == 0 {
            return Err(format!("closed after {:?}", String::from_utf8_lossy(&head)).into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8(head)?)
}
