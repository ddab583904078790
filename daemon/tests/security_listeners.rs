//! What the daemon listens on (SECURITY.md §4.6, §C1.1): TCP only for the two device
//! listeners, and the control plane only on the Unix socket `<state>/daemon.sock`. The test reads
//! this process's own sockets from `/proc`, so it is alone in its test binary: every listening
//! socket of the process is the daemon's.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_os = "linux")]

// Shared with the `it` binary, which holds every other daemon test.
#[path = "it/daemon_support/mod.rs"]
mod daemon_support;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use appduct_protocol::control::{DaemonHello, HelloParams};

/// `st` of a listening TCP socket in `/proc/net/tcp*`.
const TCP_LISTEN: &str = "0A";
/// `Flags` of a listening Unix socket in `/proc/net/unix` (`__SO_ACCEPTCON`).
const UNIX_ACCEPTCON: &str = "00010000";

/// Inodes of the sockets this process holds open.
fn own_socket_inodes() -> HashSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?.to_owned();
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// `/proc/net/tcp*` addresses: 32-bit words in host (little-endian) order, port in hex.
fn decode_tcp_address(hex: &str) -> SocketAddr {
    let (ip, port) = hex.split_once(':').unwrap();
    let port = u16::from_str_radix(port, 16).unwrap();
    let words: Vec<[u8; 4]> = (0..ip.len() / 8)
        .map(|i| {
            u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16)
                .unwrap()
                .to_le_bytes()
        })
        .collect();
    let ip = match words.as_slice() {
        [a] => IpAddr::V4(Ipv4Addr::from(*a)),
        [a, b, c, d] => {
            let mut octets = [0u8; 16];
            for (i, word) in [a, b, c, d].into_iter().enumerate() {
                octets[i * 4..i * 4 + 4].copy_from_slice(word);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => panic!("unexpected address {hex}"),
    };
    SocketAddr::new(ip, port)
}

/// Listening TCP sockets (IPv4 and IPv6) whose inode is in `own`.
fn own_tcp_listeners(own: &HashSet<u64>) -> Vec<SocketAddr> {
    let mut listeners = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = fields[9].parse().unwrap();
            if fields[3] == TCP_LISTEN && own.contains(&inode) {
                listeners.push(decode_tcp_address(fields[1]));
            }
        }
    }
    listeners.sort();
    listeners
}

/// Paths of listening Unix sockets whose inode is in `own`.
fn own_unix_listeners(own: &HashSet<u64>) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/net/unix").unwrap();
    let mut listeners = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let inode: u64 = fields[6].parse().unwrap();
        if fields[3] == UNIX_ACCEPTCON && own.contains(&inode) {
            listeners.push(PathBuf::from(fields.get(7).copied().unwrap_or("")));
        }
    }
    listeners
}

#[test]
fn proc_addresses_decode() {
    assert_eq!(
        decode_tcp_address("0100007F:1F90"),
        "127.0.0.1:8080".parse().unwrap()
    );
    assert_eq!(
        decode_tcp_address("00000000000000000000000000000000:0050"),
        "[::]:80".parse().unwrap()
    );
    assert_eq!(
        decode_tcp_address("00000000000000000000000001000000:0050"),
        "[::1]:80".parse().unwrap()
    );
}

#[tokio::test]
async fn the_only_tcp_listeners_are_the_two_device_listeners_and_control_is_the_unix_socket() {
    let own = own_socket_inodes();
    assert!(
        own_tcp_listeners(&own).is_empty() && own_unix_listeners(&own).is_empty(),
        "this test binary listens on nothing before the daemon starts"
    );

    let dir = daemon_support::state_dir();
    let daemon = daemon_support::start(dir.path()).await;
    let own = own_socket_inodes();

    let tcp = own_tcp_listeners(&own);
    let mut expected = vec![daemon.wss_addr(), daemon.web_addr()];
    expected.sort();
    assert_eq!(
        tcp, expected,
        "TCP: the wss listener and the loopback web listener, nothing else"
    );
    assert_eq!(daemon.web_addr().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));

    let control = daemon.socket_path().to_path_buf();
    assert_eq!(control, dir.path().join("daemon.sock"));
    assert_eq!(own_unix_listeners(&own), [control]);
    // And that socket is the control plane.
    let client = daemon_support::uds_client(dir.path()).await;
    let hello = client
        .call::<DaemonHello>(HelloParams::default())
        .await
        .unwrap();
    assert_eq!(hello.pid, std::process::id());

    daemon.shutdown().await;
    let own = own_socket_inodes();
    assert!(own_tcp_listeners(&own).is_empty());
    assert!(own_unix_listeners(&own).is_empty());
}
