//! Real-socket tests of the wss listener (§D2.1, §D6; SEC-32, SEC-33): TLS with a self-signed
//! P-256 certificate, dual-stack binding, the pre-claim deadline during a stalled TLS handshake,
//! and a pre-claim budget separate from the web listener's.

use crate::listener_support;
use crate::tls_support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use appduct_daemon::device_socket::{Incoming, WireMessage};
use appduct_daemon::listener::{self, AcceptContext, PreclaimBudget, RunningListener, Transport};
use appduct_protocol::pin::SpkiPin;
use appduct_protocol::sealed::StaticKeypair;
use futures_util::{SinkExt, StreamExt};
use listener_support::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

type BoxError = Box<dyn std::error::Error>;

/// A server config with a fresh self-signed P-256 certificate, and that certificate.
fn server_config() -> Result<(Arc<rustls::ServerConfig>, CertificateDer<'static>), BoxError> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let cert = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(tls_support::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)?;
    Ok((Arc::new(config), cert))
}

async fn wss_client(
    addr: SocketAddr,
    cert: &CertificateDer<'static>,
) -> Result<WebSocketStream<TlsStream<TcpStream>>, BoxError> {
    // A fresh key per test: trusting its pin trusts exactly this certificate.
    let pin = SpkiPin::from_certificate_der(cert.as_ref())?;
    let tls = tls_support::connect(addr, "localhost", pin).await?;
    let (ws, response) = timeout(
        WAIT,
        tokio_tungstenite::client_async("wss://localhost/any/path?x=1", tls),
    )
    .await??;
    assert_eq!(response.status(), 101);
    Ok(ws)
}

fn start_wss(
    harness: &Harness,
    config: Arc<rustls::ServerConfig>,
) -> Result<RunningListener, BoxError> {
    let listeners = listener::bind_wss(0)?;
    let sealed = Arc::new(StaticKeypair::from_private_bytes([7; 32]));
    Ok(listener::serve_wss(
        listeners,
        config,
        sealed,
        harness.ctx.clone(),
    )?)
}

fn loopback(running: &RunningListener, ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, running.local_addr().port())
}

#[tokio::test]
async fn wss_round_trip_over_the_dual_stack_socket() -> TestResult {
    let (config, cert) = server_config()?;
    let mut h = harness(8, LONG);
    let wss = start_wss(&h, config)?;
    let bound = wss.local_addr().ip();
    assert!(bound.is_unspecified(), "all interfaces: {bound}");

    let mut ws = wss_client(loopback(&wss, Ipv4Addr::LOCALHOST.into()), &cert).await?;
    let mut device = next_device(&mut h.devices).await?;
    assert_eq!(device.transport, Transport::Native);
    assert_eq!(device.peer.ip(), IpAddr::from(Ipv4Addr::LOCALHOST));

    ws.send(Message::Text("{\"type\":\"session_resume\"}".into()))
        .await?;
    assert_eq!(
        timeout(WAIT, device.socket.recv()).await?,
        Incoming::Message(WireMessage::Text(
            "{\"type\":\"session_resume\"}".to_owned()
        ))
    );
    device.socket.sender().send_text("{}".to_owned()).await?;
    assert_eq!(
        timeout(WAIT, ws.next()).await?.ok_or("ended")??,
        Message::Text("{}".into())
    );
    ws.send(Message::Ping(b"p".to_vec().into())).await?;
    assert_eq!(
        timeout(WAIT, ws.next()).await?.ok_or("ended")??,
        Message::Pong(b"p".to_vec().into())
    );

    // The same socket serves IPv6 when it is the dual-stack one.
    if bound.is_ipv6() {
        let _v6 = wss_client(loopback(&wss, Ipv6Addr::LOCALHOST.into()), &cert).await?;
        let device = next_device(&mut h.devices).await?;
        assert_eq!(device.peer.ip(), IpAddr::from(Ipv6Addr::LOCALHOST));
    }
    Ok(())
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_dropped_at_the_preclaim_deadline() -> TestResult {
    let (config, _) = server_config()?;
    let timeout_ms = 300;
    let mut h = harness(4, Duration::from_millis(timeout_ms));
    let wss = start_wss(&h, config)?;
    let started = Instant::now();
    let mut stream = TcpStream::connect(loopback(&wss, Ipv4Addr::LOCALHOST.into())).await?;
    // The first bytes of a TLS record header, then silence.
    stream.write_all(&[0x16, 0x03, 0x01]).await?;
    let (received, _) = read_until_closed(&mut stream).await?;
    assert!(received.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(timeout_ms));
    assert!(h.devices.try_recv().is_err());
    // The failed handshake gave its slot back (right after dropping TCP).
    timeout(WAIT, async {
        while h.ctx.preclaim.in_use() != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn each_listener_has_its_own_preclaim_budget() -> TestResult {
    let (config, cert) = server_config()?;
    let mut h = harness(1, LONG);
    let wss = start_wss(&h, config)?;
    // The daemon gives the web listener a budget of its own, as here.
    let web_ctx = AcceptContext {
        preclaim: PreclaimBudget::with_capacity(1),
        ..h.ctx.clone()
    };
    let web = listener::serve_web(listener::bind_web()?, Vec::new(), web_ctx.clone())?;

    // The wss budget is full; the web listener still upgrades.
    let _ws = wss_client(loopback(&wss, Ipv4Addr::LOCALHOST.into()), &cert).await?;
    let _native = next_device(&mut h.devices).await?;
    assert_eq!(h.ctx.preclaim.in_use(), 1);
    let mut stream = TcpStream::connect(web.local_addr()).await?;
    let port = web.local_addr().port();
    stream
        .write_all(
            format!(
                "GET / HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: Upgrade\r\n\
                 Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    assert!(read_head(&mut stream).await?.starts_with("HTTP/1.1 101 "));
    let page = next_device(&mut h.devices).await?;
    assert_eq!(page.transport, Transport::Web);
    assert_eq!(web_ctx.preclaim.in_use(), 1);
    assert_eq!(h.ctx.preclaim.in_use(), 1);
    Ok(())
}
