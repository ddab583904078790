//! The process at the other end of a loopback TCP connection (SECURITY.md §4.19): what the
//! kernel's `SO_PEERCRED` gives the control socket, found for the HTTP API's connections so
//! that approvals (§C11.1, SECURITY.md §4.18) treat an HTTP or `/mcp` caller like a socket
//! peer.
//!
//! On Linux: the client's socket is the row of `/proc/net/tcp` (or `tcp6`, for a dual-stack
//! socket with a v4-mapped address) whose local address is the connection's peer address and
//! whose remote address is the server's own; that row names the socket's owner uid and inode.
//! A socket of another user is never looked up further. Then the processes of the daemon's
//! user are searched, newest pid first, for a descriptor `socket:[inode]`; the first one found
//! is the peer. It is `None` when any step fails: another OS, a socket of another user, a
//! client that closed or exited before the search, a descriptor handed to a process of
//! another user. A socket shared by several processes (inherited across `fork`, passed over a
//! Unix socket) names one of them — as `SO_PEERCRED` names the process that connected, not
//! the one that writes.
//!
//! The search costs one `readlink` per descriptor of every process of the user newer than the
//! client, which that user's processes can make arbitrarily large (a process holding 15,000
//! descriptors made each lookup cost the daemon ~80 ms of CPU). So one lookup may take at most
//! [`LOOKUP_BUDGET`], waiting for its turn included, and at most [`MAX_CONCURRENT_LOOKUPS`] run at
//! once; past the budget the pid is unknown, as when the client is gone (docs/http.md §H2.6).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Longest one lookup may take, from the accept (waiting for a lookup slot included); past it
/// the peer is unknown.
pub const LOOKUP_BUDGET: Duration = Duration::from_millis(250);

/// Lookups that may run at once (each is one blocking thread reading `/proc`).
pub const MAX_CONCURRENT_LOOKUPS: usize = 2;

/// The pid of the process of the daemon's user that holds the client end of the loopback TCP
/// connection the server sees as `local` ← `peer`. Blocking (reads `/proc`); `None` when it
/// cannot be found (see the module notes), including once [`LOOKUP_BUDGET`] has passed.
pub fn loopback_peer_pid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    loopback_peer_pid_by(local, peer, Instant::now() + LOOKUP_BUDGET)
}

/// [`loopback_peer_pid`] that gives up (`None`) at `deadline`.
pub fn loopback_peer_pid_by(local: SocketAddr, peer: SocketAddr, deadline: Instant) -> Option<u32> {
    if !local.ip().is_loopback() || !peer.ip().is_loopback() {
        return None;
    }
    let pid = imp::loopback_peer_pid(local, peer, deadline);
    if pid.is_none() && Instant::now() >= deadline {
        tracing::debug!(%peer, "HTTP peer lookup gave up at its time budget");
    }
    pid
}

#[cfg(target_os = "linux")]
mod imp {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::unix::fs::MetadataExt as _;
    use std::time::Instant;

    /// A row of `/proc/net/tcp{,6}`: owner uid and inode of a socket.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) struct Row {
        pub uid: u32,
        pub inode: u64,
    }

    pub(super) fn loopback_peer_pid(
        local: SocketAddr,
        peer: SocketAddr,
        deadline: Instant,
    ) -> Option<u32> {
        let me = rustix::process::geteuid().as_raw();
        let row = ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .find_map(|table| {
                let text = std::fs::read_to_string(table).ok()?;
                find_row(&text, peer, local)
            })?;
        if row.uid != me || row.inode == 0 {
            tracing::debug!(uid = row.uid, "HTTP peer socket belongs to another user");
            return None;
        }
        holder_of(row.inode, me, deadline)
    }

    /// The row whose local address is `client` and remote address is `server`.
    pub(super) fn find_row(text: &str, client: SocketAddr, server: SocketAddr) -> Option<Row> {
        text.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                return None;
            }
            if !same(parse_addr(f[1])?, client) || !same(parse_addr(f[2])?, server) {
                return None;
            }
            Some(Row {
                uid: f[7].parse().ok()?,
                inode: f[9].parse().ok()?,
            })
        })
    }

    /// Equal addresses, a v4-mapped IPv6 address equal to its IPv4 form.
    fn same(a: SocketAddr, b: SocketAddr) -> bool {
        let canon = |ip: IpAddr| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        a.port() == b.port() && canon(a.ip()) == canon(b.ip())
    }

    /// `0100007F:1F90` (IPv4) or 32 hex digits then `:port` (IPv6): each 32-bit word as the
    /// kernel printed it from memory, so in the machine's byte order; the port big-endian.
    pub(super) fn parse_addr(s: &str) -> Option<SocketAddr> {
        let (ip, port) = s.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
        let ip = match ip.len() {
            8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
            32 => {
                let mut bytes = [0u8; 16];
                for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                    chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
                }
                IpAddr::V6(Ipv6Addr::from(bytes))
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }

    /// The newest process of user `uid` with a descriptor on socket `inode`; `None` once
    /// `deadline` passes (checked before each process and each descriptor).
    fn holder_of(inode: u64, uid: u32, deadline: Instant) -> Option<u32> {
        let target = format!("socket:[{inode}]");
        let mut pids: Vec<u32> = std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable_by(|a, b| b.cmp(a));
        let late = || Instant::now() >= deadline;
        for pid in pids {
            if late() {
                return None;
            }
            let dir = format!("/proc/{pid}");
            if std::fs::metadata(&dir).map(|m| m.uid()).ok() != Some(uid) {
                continue;
            }
            let Ok(fds) = std::fs::read_dir(format!("{dir}/fd")) else {
                continue;
            };
            for fd in fds.filter_map(Result::ok) {
                if late() {
                    return None;
                }
                if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                    return Some(pid);
                }
            }
        }
        None
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::net::SocketAddr;

    pub(super) fn loopback_peer_pid(
        _local: SocketAddr,
        _peer: SocketAddr,
        _deadline: std::time::Instant,
    ) -> Option<u32> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::imp::{Row, find_row, parse_addr};
    use std::net::SocketAddr;

    #[test]
    fn addresses_parse_in_the_kernel_format() {
        let v4 = if cfg!(target_endian = "little") {
            "0100007F:1F90"
        } else {
            "7F000001:1F90"
        };
        assert_eq!(
            parse_addr(v4),
            Some("127.0.0.1:8080".parse::<SocketAddr>().unwrap())
        );
        // ::ffff:127.0.0.1 as a little-endian kernel prints it.
        if cfg!(target_endian = "little") {
            assert_eq!(
                parse_addr("0000000000000000FFFF00000100007F:0050"),
                Some("[::ffff:127.0.0.1]:80".parse::<SocketAddr>().unwrap())
            );
        }
        assert_eq!(parse_addr("nonsense"), None);
        assert_eq!(parse_addr("0100007F:zz"), None);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn the_client_row_is_found_not_the_servers() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 111 1 0 20 4 30 10 -1\n\
   1: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1001        0 222 1 0 20 4 30 10 -1\n";
        let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        assert_eq!(
            find_row(table, client, server),
            Some(Row {
                uid: 1001,
                inode: 222
            })
        );
        let v6_client: SocketAddr = "[::ffff:127.0.0.1]:50000".parse().unwrap();
        assert_eq!(
            find_row(table, v6_client, server).map(|r| r.inode),
            Some(222)
        );
        assert_eq!(
            find_row(table, server, "127.0.0.1:1".parse().unwrap()),
            None
        );
    }
}
