//! Test seams (01 §9.1): every way the daemon and the typed client reach the outside world
//! (wall clock, network interfaces, processes, peer identity, external commands, spawning) goes
//! through one of these traits. Each has its production implementation here and a small test
//! double, so unit tests stay fast, deterministic and socket-free.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::address::InterfaceAddr;
use crate::state_dir;

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the guarded values
/// here are plain tables that stay consistent across a panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Wall clock

/// The wall clock: `expiresAt`, notification `ts`, audit timestamps, `startedAt`, leaf validity.
/// Timers use tokio time instead (paused in tests).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> u64;
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        // A clock before 1970 is a broken host; report the epoch rather than fail.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A settable clock for tests. Clones share one time, so a test keeps a clone and moves the
/// daemon's clock by setting its own.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(now_unix_ms: u64) -> Self {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(now_unix_ms)),
        }
    }

    pub fn set(&self, now_unix_ms: u64) {
        self.now_ms.store(now_unix_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// Address detection

/// The host's interface addresses in OS order, fed to
/// [`select_advertised`](crate::address::select_advertised).
pub trait AddressSource: Send + Sync + fmt::Debug {
    fn interfaces(&self) -> Vec<InterfaceAddr>;
}

/// OS interface enumeration.
///
/// On Linux this asks the kernel over an `AF_NETLINK` route socket (`RTM_GETLINK` for names and
/// `IFF_UP`/`IFF_LOOPBACK`, `RTM_GETADDR` for addresses), through `rustix`: the crate forbids
/// `unsafe`, so `getifaddrs` (libc) is out, and netlink gives every address with its flags in
/// kernel order, which `/proc/net` does not for IPv4. Elsewhere (macOS), and if netlink fails,
/// it falls back to the source address the routing table picks for a UDP "connect" to a
/// documentation address (no packet is sent): one address per family, reported as up.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsAddresses;

impl AddressSource for OsAddresses {
    fn interfaces(&self) -> Vec<InterfaceAddr> {
        #[cfg(target_os = "linux")]
        match netlink::interfaces() {
            Ok(list) => return list,
            Err(e) => {
                tracing::warn!(
                    "cannot enumerate interfaces over netlink ({e}); using the route to a documentation address instead"
                );
            }
        }
        route_source_addresses()
    }
}

/// The local addresses the routing table would use to reach 192.0.2.1 and 2001:db8::1.
fn route_source_addresses() -> Vec<InterfaceAddr> {
    let probes: [(&str, &str); 2] = [("0.0.0.0:0", "192.0.2.1:9"), ("[::]:0", "[2001:db8::1]:9")];
    probes
        .iter()
        .filter_map(|(bind, target)| {
            let socket = std::net::UdpSocket::bind(bind).ok()?;
            socket.connect(target).ok()?;
            let local = socket.local_addr().ok()?.ip();
            Some(InterfaceAddr::new("default-route", local))
        })
        .collect()
}

#[cfg(target_os = "linux")]
mod netlink {
    //! A minimal `NETLINK_ROUTE` dump reader: requests are built and replies parsed as plain
    //! bytes (host byte order, 4-byte alignment), so no `unsafe` is needed.

    use std::collections::HashMap;
    use std::io;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    use rustix::net::netlink::SocketAddrNetlink;
    use rustix::net::sockopt::Timeout;
    use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

    use crate::address::InterfaceAddr;

    const NLMSG_HDR_LEN: usize = 16;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_DUMP: u16 = 0x300;
    const RTM_NEWLINK: u16 = 16;
    const RTM_GETLINK: u16 = 18;
    const RTM_NEWADDR: u16 = 20;
    const RTM_GETADDR: u16 = 22;
    const IFINFOMSG_LEN: usize = 16;
    const IFADDRMSG_LEN: usize = 8;
    const IFLA_IFNAME: u16 = 3;
    const IFA_ADDRESS: u16 = 1;
    const IFA_LOCAL: u16 = 2;
    const IFF_UP: u32 = 0x1;
    const IFF_LOOPBACK: u32 = 0x8;
    const AF_INET: u8 = 2;
    const AF_INET6: u8 = 10;

    struct Link {
        name: String,
        flags: u32,
    }

    pub(super) fn interfaces() -> io::Result<Vec<InterfaceAddr>> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        )?;
        // The kernel always answers a dump; the timeout only guards against a broken host.
        rustix::net::sockopt::set_socket_timeout(&fd, Timeout::Recv, Some(Duration::from_secs(2)))?;

        let mut links = HashMap::new();
        for payload in dump(&fd, RTM_GETLINK, IFINFOMSG_LEN, 1)? {
            if let Some((index, link)) = parse_link(&payload) {
                links.insert(index, link);
            }
        }
        let mut out = Vec::new();
        for payload in dump(&fd, RTM_GETADDR, IFADDRMSG_LEN, 2)? {
            let Some((index, addr)) = parse_addr(&payload) else {
                continue;
            };
            let (name, flags) = links
                .get(&index)
                .map_or_else(|| (format!("if{index}"), 0), |l| (l.name.clone(), l.flags));
            out.push(InterfaceAddr {
                name,
                addr,
                up: flags & IFF_UP != 0,
                loopback: flags & IFF_LOOPBACK != 0,
            });
        }
        Ok(out)
    }

    /// Sends one dump request and returns the payloads (after the netlink header) of the
    /// `RTM_NEW*` replies, in kernel order.
    fn dump(fd: &OwnedFd, kind: u16, body_len: usize, seq: u32) -> io::Result<Vec<Vec<u8>>> {
        let total = NLMSG_HDR_LEN + body_len;
        let mut req = Vec::with_capacity(total);
        req.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_ne_bytes());
        req.extend_from_slice(&kind.to_ne_bytes());
        req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        req.extend_from_slice(&seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        // A zeroed ifinfomsg/ifaddrmsg: family AF_UNSPEC, i.e. every family.
        req.resize(total, 0);
        rustix::net::sendto(fd, &req, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;

        let want = if kind == RTM_GETLINK {
            RTM_NEWLINK
        } else {
            RTM_NEWADDR
        };
        let mut payloads = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let (n, _) = rustix::net::recv(fd, &mut buf[..], RecvFlags::empty())?;
            let mut rest = &buf[..n];
            if rest.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "netlink closed",
                ));
            }
            while rest.len() >= NLMSG_HDR_LEN {
                let len = read_u32(rest, 0) as usize;
                let msg_type = read_u16(rest, 4);
                let msg_seq = read_u32(rest, 8);
                if len < NLMSG_HDR_LEN || len > rest.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed netlink message",
                    ));
                }
                let body = &rest[NLMSG_HDR_LEN..len];
                if msg_seq == seq {
                    match msg_type {
                        NLMSG_DONE => return Ok(payloads),
                        NLMSG_ERROR => {
                            let errno = if body.len() >= 4 {
                                i32::from_ne_bytes([body[0], body[1], body[2], body[3]])
                            } else {
                                0
                            };
                            if errno != 0 {
                                return Err(io::Error::from_raw_os_error(-errno));
                            }
                        }
                        t if t == want => payloads.push(body.to_vec()),
                        _ => {}
                    }
                }
                let advance = align4(len).min(rest.len());
                rest = &rest[advance..];
            }
        }
    }

    fn parse_link(body: &[u8]) -> Option<(u32, Link)> {
        if body.len() < IFINFOMSG_LEN {
            return None;
        }
        let index = read_u32(body, 4);
        let flags = read_u32(body, 8);
        let mut name = None;
        for (kind, data) in attributes(&body[IFINFOMSG_LEN..]) {
            if kind == IFLA_IFNAME {
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                name = Some(String::from_utf8_lossy(&data[..end]).into_owned());
            }
        }
        Some((
            index,
            Link {
                name: name.unwrap_or_else(|| format!("if{index}")),
                flags,
            },
        ))
    }

    fn parse_addr(body: &[u8]) -> Option<(u32, IpAddr)> {
        if body.len() < IFADDRMSG_LEN {
            return None;
        }
        let family = body[0];
        let index = read_u32(body, 4);
        let (mut address, mut local) = (None, None);
        for (kind, data) in attributes(&body[IFADDRMSG_LEN..]) {
            let ip = match (family, data.len()) {
                (AF_INET, 4) => IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3])),
                (AF_INET6, 16) => {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(data);
                    IpAddr::V6(Ipv6Addr::from(octets))
                }
                _ => continue,
            };
            match kind {
                IFA_ADDRESS => address = Some(ip),
                IFA_LOCAL => local = Some(ip),
                _ => {}
            }
        }
        // On point-to-point links IFA_ADDRESS is the peer; IFA_LOCAL is ours when present.
        local.or(address).map(|ip| (index, ip))
    }

    /// Iterates `rtattr`s: (type, payload).
    fn attributes(mut rest: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
        std::iter::from_fn(move || {
            if rest.len() < 4 {
                return None;
            }
            let len = usize::from(read_u16(rest, 0));
            let kind = read_u16(rest, 2) & 0x3fff; // drop NLA_F_NESTED / NLA_F_NET_BYTEORDER
            if len < 4 || len > rest.len() {
                return None;
            }
            let data = &rest[4..len];
            rest = &rest[align4(len).min(rest.len())..];
            Some((kind, data))
        })
    }

    fn align4(n: usize) -> usize {
        (n + 3) & !3
    }

    fn read_u16(b: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes([b[at], b[at + 1]])
    }

    fn read_u32(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
            let mut v = Vec::new();
            v.extend_from_slice(&u16::try_from(4 + data.len()).unwrap().to_ne_bytes());
            v.extend_from_slice(&kind.to_ne_bytes());
            v.extend_from_slice(data);
            v.resize(align4(v.len()), 0);
            v
        }

        #[test]
        fn parses_an_ifaddrmsg_preferring_ifa_local() {
            let mut body = vec![AF_INET, 24, 0, 0];
            body.extend_from_slice(&7u32.to_ne_bytes());
            body.extend(attr(IFA_ADDRESS, &[10, 0, 0, 2]));
            body.extend(attr(IFA_LOCAL, &[10, 0, 0, 1]));
            assert_eq!(parse_addr(&body), Some((7, "10.0.0.1".parse().unwrap())));

            let mut v6 = vec![AF_INET6, 64, 0, 0];
            v6.extend_from_slice(&3u32.to_ne_bytes());
            let ip: Ipv6Addr = "fd00::1".parse().unwrap();
            v6.extend(attr(IFA_ADDRESS, &ip.octets()));
            assert_eq!(parse_addr(&v6), Some((3, IpAddr::V6(ip))));

            // Truncated or attribute-less messages yield nothing.
            assert_eq!(parse_addr(&body[..4]), None);
            assert_eq!(parse_addr(&body[..8]), None);
        }

        #[test]
        fn parses_an_ifinfomsg_name_and_flags() {
            let mut body = vec![0u8, 0, 0, 0];
            body.extend_from_slice(&2u32.to_ne_bytes());
            body.extend_from_slice(&(IFF_UP | IFF_LOOPBACK).to_ne_bytes());
            body.extend_from_slice(&0u32.to_ne_bytes());
            body.extend(attr(IFLA_IFNAME, b"lo\0"));
            let (index, link) = parse_link(&body).unwrap();
            assert_eq!(index, 2);
            assert_eq!(link.name, "lo");
            assert_eq!(link.flags, IFF_UP | IFF_LOOPBACK);
        }

        #[test]
        fn the_kernel_reports_loopback() {
            // Every Linux network namespace has `lo` with 127.0.0.1, flagged loopback.
            let list = interfaces().unwrap();
            let lo = list
                .iter()
                .find(|i| i.addr == IpAddr::V4(Ipv4Addr::LOCALHOST))
                .expect("127.0.0.1 is listed");
            assert!(lo.loopback, "{lo:?}");
        }
    }
}

/// A settable list of interfaces for tests; clones share the list, so a test can change what the
/// daemon sees between calls.
#[derive(Debug, Clone, Default)]
pub struct StaticAddresses {
    list: Arc<Mutex<Vec<InterfaceAddr>>>,
}

impl StaticAddresses {
    /// Each address on its own up, non-loopback interface (`test0`, `test1`, …).
    pub fn new(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        let s = StaticAddresses::default();
        s.set(addrs);
        s
    }

    /// Like [`StaticAddresses::new`] from text literals.
    pub fn parse<'a>(
        addrs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, std::net::AddrParseError> {
        let parsed = addrs
            .into_iter()
            .map(str::parse)
            .collect::<Result<Vec<IpAddr>, _>>()?;
        Ok(StaticAddresses::new(parsed))
    }

    pub fn set(&self, addrs: impl IntoIterator<Item = IpAddr>) {
        let list = addrs
            .into_iter()
            .enumerate()
            .map(|(i, addr)| InterfaceAddr::new(format!("test{i}"), addr))
            .collect();
        *lock(&self.list) = list;
    }

    pub fn set_interfaces(&self, list: Vec<InterfaceAddr>) {
        *lock(&self.list) = list;
    }
}

impl AddressSource for StaticAddresses {
    fn interfaces(&self) -> Vec<InterfaceAddr> {
        lock(&self.list).clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Process probe

/// Liveness and signalling of other processes (01 §6.2, §6.3).
pub trait ProcessProbe: Send + Sync + fmt::Debug {
    /// Whether another open file description holds a lock on `path`: `Some(true)` held,
    /// `Some(false)` free or absent, `None` when advisory locks are unavailable there (callers
    /// then fall back to the pid test).
    fn lock_held(&self, path: &Path) -> Option<bool>;
    /// `kill(pid, 0)` succeeds or fails with `EPERM`.
    fn pid_alive(&self, pid: u32) -> bool;
    /// The process is a zombie (Linux: `State: Z` in `/proc/<pid>/status`; elsewhere false).
    fn is_zombie(&self, pid: u32) -> bool;
    /// Sends `SIGTERM`.
    fn terminate(&self, pid: u32) -> io::Result<()>;
}

/// The OS process probe.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsProcessProbe;

fn to_pid(pid: u32) -> Option<rustix::process::Pid> {
    // Pid 0 and values beyond i32 would address process groups or nothing at all.
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

impl ProcessProbe for OsProcessProbe {
    fn lock_held(&self, path: &Path) -> Option<bool> {
        let file = match state_dir::open_read(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(false),
            // Unreadable or a symlink: nobody can hold a lock we could see.
            Err(_) => return Some(false),
        };
        // A shared probe conflicts with the daemon's exclusive lock but not with other probes.
        match file.try_lock_shared() {
            Ok(()) => Some(false),
            Err(std::fs::TryLockError::WouldBlock) => Some(true),
            Err(std::fs::TryLockError::Error(_)) => None,
        }
    }

    fn pid_alive(&self, pid: u32) -> bool {
        let Some(pid) = to_pid(pid) else {
            return false;
        };
        match rustix::process::test_kill_process(pid) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        }
    }

    fn is_zombie(&self, pid: u32) -> bool {
        if cfg!(target_os = "linux") {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .is_ok_and(|status| status_is_zombie(&status))
        } else {
            false
        }
    }

    fn terminate(&self, pid: u32) -> io::Result<()> {
        let pid = to_pid(pid).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("invalid pid {pid}"))
        })?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        Ok(())
    }
}

/// Whether a `/proc/<pid>/status` text says the process is a zombie.
pub fn status_is_zombie(status: &str) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("State:"))
        .is_some_and(|state| state.trim_start().starts_with('Z'))
}

/// A table-driven process probe for tests.
#[derive(Debug, Default)]
pub struct FakeProcessProbe {
    table: Mutex<FakeProcessTable>,
}

#[derive(Debug, Default)]
struct FakeProcessTable {
    locks: HashMap<PathBuf, Option<bool>>,
    alive: HashSet<u32>,
    zombies: HashSet<u32>,
    terminated: Vec<u32>,
}

impl FakeProcessProbe {
    pub fn new() -> Self {
        FakeProcessProbe::default()
    }

    /// What `lock_held(path)` answers (unlisted paths: `Some(false)`).
    pub fn set_lock(&self, path: impl Into<PathBuf>, held: Option<bool>) {
        lock(&self.table).locks.insert(path.into(), held);
    }

    /// A live process.
    pub fn add_alive(&self, pid: u32) {
        lock(&self.table).alive.insert(pid);
    }

    /// A zombie: `pid_alive` is true (as with `kill(pid, 0)`) and `is_zombie` too.
    pub fn add_zombie(&self, pid: u32) {
        let mut t = lock(&self.table);
        t.alive.insert(pid);
        t.zombies.insert(pid);
    }

    /// Pids `terminate` was called for, in order.
    pub fn terminated(&self) -> Vec<u32> {
        lock(&self.table).terminated.clone()
    }
}

impl ProcessProbe for FakeProcessProbe {
    fn lock_held(&self, path: &Path) -> Option<bool> {
        lock(&self.table)
            .locks
            .get(path)
            .copied()
            .unwrap_or(Some(false))
    }

    fn pid_alive(&self, pid: u32) -> bool {
        lock(&self.table).alive.contains(&pid)
    }

    fn is_zombie(&self, pid: u32) -> bool {
        lock(&self.table).zombies.contains(&pid)
    }

    fn terminate(&self, pid: u32) -> io::Result<()> {
        let mut t = lock(&self.table);
        t.terminated.push(pid);
        if t.alive.remove(&pid) {
            t.zombies.remove(&pid);
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no process {pid}"),
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Peer identity

/// Decides whether a control-socket peer may talk to the daemon (03 §2.2).
pub trait PeerCheck: Send + Sync + fmt::Debug {
    /// `peer_euid` is `None` when the platform could not report it; that must be refused.
    fn allow(&self, peer_euid: Option<u32>) -> bool;
}

/// Production check: the peer's effective uid equals the daemon's.
#[derive(Debug, Clone, Copy)]
pub struct SameEuid {
    euid: u32,
}

impl SameEuid {
    pub fn new() -> Self {
        SameEuid {
            euid: rustix::process::geteuid().as_raw(),
        }
    }

    /// The uid this check accepts.
    pub fn euid(&self) -> u32 {
        self.euid
    }
}

impl Default for SameEuid {
    fn default() -> Self {
        SameEuid::new()
    }
}

impl PeerCheck for SameEuid {
    fn allow(&self, peer_euid: Option<u32>) -> bool {
        peer_euid == Some(self.euid)
    }
}

/// A test double that returns a chosen verdict for every peer.
#[derive(Debug, Clone, Copy)]
pub struct FixedPeerCheck(pub bool);

impl PeerCheck for FixedPeerCheck {
    fn allow(&self, _peer_euid: Option<u32>) -> bool {
        self.0
    }
}

// ---------------------------------------------------------------------------------------------
// External commands

/// A boxed `Send` future, so the seams stay usable as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Longest stderr text kept in a [`CommandOutput`], in characters.
pub const MAX_STDERR_CHARS: usize = 4096;
/// Default time limit of one external command (project decision, 01 §9.1).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// What an external command produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutput {
    /// Exit code; `None` when a signal ended the process.
    pub code: Option<i32>,
    /// Standard output, lossily decoded as UTF-8.
    pub stdout: String,
    /// Standard error, lossily decoded, whitespace-trimmed and cut to 4096 characters.
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `adb`, `xcrun simctl`, `xcrun devicectl` and the like for delivery (02 §7).
pub trait CommandRunner: Send + Sync + fmt::Debug {
    /// Runs `program` with `args` (argv only, never through a shell) and `env` added to the
    /// inherited environment.
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>>;
}

/// Production runner on `tokio::process`, killing the command after its timeout.
#[derive(Debug, Clone, Copy)]
pub struct TokioCommandRunner {
    timeout: Duration,
}

impl TokioCommandRunner {
    pub fn new() -> Self {
        TokioCommandRunner {
            timeout: COMMAND_TIMEOUT,
        }
    }

    pub fn with_timeout(timeout: Duration) -> Self {
        TokioCommandRunner { timeout }
    }
}

impl Default for TokioCommandRunner {
    fn default() -> Self {
        TokioCommandRunner::new()
    }
}

impl CommandRunner for TokioCommandRunner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        Box::pin(async move {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args)
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // Dropping the future on timeout kills the command.
                .kill_on_drop(true);
            let output = tokio::time::timeout(self.timeout, cmd.output())
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "`{program}` did not finish within {} s",
                            self.timeout.as_secs()
                        ),
                    )
                })??;
            Ok(CommandOutput {
                code: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: trim_stderr(&String::from_utf8_lossy(&output.stderr)),
            })
        })
    }
}

/// Trims whitespace and keeps at most [`MAX_STDERR_CHARS`] characters.
pub fn trim_stderr(raw: &str) -> String {
    let trimmed = raw.trim();
    match trimmed.char_indices().nth(MAX_STDERR_CHARS) {
        Some((cut, _)) => trimmed[..cut].to_owned(),
        None => trimmed.to_owned(),
    }
}

/// One call a [`ScriptedCommandRunner`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInvocation {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// A test double: answers calls in order from a script and logs every argv. A call beyond the
/// script fails with `NotFound`, so an unexpected command never passes silently.
#[derive(Debug, Default)]
pub struct ScriptedCommandRunner {
    script: Mutex<VecDeque<Result<CommandOutput, (io::ErrorKind, String)>>>,
    log: Mutex<Vec<CommandInvocation>>,
}

impl ScriptedCommandRunner {
    pub fn new() -> Self {
        ScriptedCommandRunner::default()
    }

    pub fn push_output(&self, output: CommandOutput) {
        lock(&self.script).push_back(Ok(output));
    }

    pub fn push_error(&self, kind: io::ErrorKind, message: impl Into<String>) {
        lock(&self.script).push_back(Err((kind, message.into())));
    }

    pub fn invocations(&self) -> Vec<CommandInvocation> {
        lock(&self.log).clone()
    }
}

impl CommandRunner for ScriptedCommandRunner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        lock(&self.log).push(CommandInvocation {
            program: program.to_owned(),
            args: args.to_vec(),
            env: env.to_vec(),
        });
        let next = lock(&self.script).pop_front();
        Box::pin(async move {
            match next {
                Some(Ok(output)) => Ok(output),
                Some(Err((kind, message))) => Err(io::Error::new(kind, message)),
                None => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no scripted output left for `{program}`"),
                )),
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Spawning the daemon

/// Variable a spawned daemon must never inherit (01 §4.3).
pub const VERSION_OVERRIDE_ENV: &str = "APPDUCT_DAEMON_VERSION_OVERRIDE";

/// What to start for `daemon run` (01 §6.4 step 6). Build it with [`SpawnRequest::daemon_run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Absolute state directory: the child's working directory and `APPDUCT_STATE_DIR`.
    pub state_dir: PathBuf,
    /// The child's complete environment.
    pub env: Vec<(OsString, OsString)>,
}

impl SpawnRequest {
    /// `current_exe() daemon run --state-dir <dir>` with this process's environment, adjusted.
    pub fn daemon_run(state_dir: &Path) -> io::Result<Self> {
        Ok(SpawnRequest::daemon_run_with(
            std::env::current_exe()?,
            state_dir,
            std::env::vars_os(),
        ))
    }

    /// Like [`SpawnRequest::daemon_run`] with an explicit program and base environment: the
    /// environment loses `APPDUCT_DAEMON_VERSION_OVERRIDE` and gains
    /// `APPDUCT_STATE_DIR=<state_dir>`.
    pub fn daemon_run_with(
        program: PathBuf,
        state_dir: &Path,
        base_env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Self {
        let state_env = OsStr::new(state_dir::STATE_DIR_ENV);
        let mut env: Vec<(OsString, OsString)> = base_env
            .into_iter()
            .filter(|(k, _)| k != OsStr::new(VERSION_OVERRIDE_ENV) && k != state_env)
            .collect();
        env.push((state_env.to_owned(), state_dir.as_os_str().to_owned()));
        SpawnRequest {
            program,
            args: vec![
                "daemon".into(),
                "run".into(),
                "--state-dir".into(),
                state_dir.as_os_str().to_owned(),
            ],
            state_dir: state_dir.to_path_buf(),
            env,
        }
    }

    /// Where the child's stdout and stderr go.
    pub fn log_path(&self) -> PathBuf {
        self.state_dir.join(state_dir::DAEMON_LOG_FILE)
    }
}

/// Shared exit slot between a spawned child and whoever reaps it.
#[derive(Debug, Default)]
struct ExitSlot {
    status: Mutex<Option<ExitStatus>>,
    changed: Condvar,
}

/// A spawned daemon process. Someone else (a background thread, or a test) reaps it; this
/// handle only observes the outcome.
#[derive(Debug, Clone)]
pub struct SpawnedChild {
    pid: u32,
    slot: Arc<ExitSlot>,
}

/// Reports the exit of a [`SpawnedChild`] (used by the reaper thread and by test doubles).
#[derive(Debug, Clone)]
pub struct ExitReporter {
    slot: Arc<ExitSlot>,
}

impl ExitReporter {
    pub fn report(&self, status: ExitStatus) {
        *lock(&self.slot.status) = Some(status);
        self.slot.changed.notify_all();
    }
}

impl SpawnedChild {
    /// A handle for `pid` whose exit is reported through the returned [`ExitReporter`].
    pub fn new(pid: u32) -> (SpawnedChild, ExitReporter) {
        let slot = Arc::new(ExitSlot::default());
        (
            SpawnedChild {
                pid,
                slot: slot.clone(),
            },
            ExitReporter { slot },
        )
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status once the child has exited; never blocks.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        *lock(&self.slot.status)
    }

    /// Blocks up to `timeout` for the exit status.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitStatus> {
        let guard = lock(&self.slot.status);
        let (guard, _) = self
            .slot
            .changed
            .wait_timeout_while(guard, timeout, |status| status.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *guard
    }
}

/// Starts a detached daemon (01 §6.4 step 6).
pub trait Spawner: Send + Sync + fmt::Debug {
    fn spawn_daemon(&self, req: SpawnRequest) -> io::Result<SpawnedChild>;
}

/// Production spawner: runs the request with stdin from `/dev/null`, stdout and stderr appended
/// to `daemon.log` (`O_APPEND`, 0600, no symlink following), the state directory as working
/// directory, exactly the request's environment, in a new process group, and reaps the child on
/// a background thread so it never lingers as a zombie.
///
/// A new process group (not `setsid`) keeps terminal-generated signals (`SIGINT`, `SIGQUIT`,
/// `SIGTSTP`, and `SIGHUP` sent to the foreground group) away from the daemon: `setsid` on
/// `Command` is not stable Rust and calling it from `pre_exec` needs `unsafe`, which this crate
/// forbids. The daemon's stdio never refers to the terminal, so the controlling terminal it
/// still nominally shares is never read or written.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReexecSpawner;

impl Spawner for ReexecSpawner {
    fn spawn_daemon(&self, req: SpawnRequest) -> io::Result<SpawnedChild> {
        use std::os::unix::process::CommandExt;

        let log_path = req.log_path();
        let log = state_dir::open_append(&log_path)?;
        let log_err = log.try_clone()?;
        let mut cmd = std::process::Command::new(&req.program);
        cmd.args(&req.args)
            .env_clear()
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&req.state_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        let mut child = cmd.spawn()?;
        let (handle, reporter) = SpawnedChild::new(child.id());
        std::thread::Builder::new()
            .name("appduct-daemon-reaper".into())
            .spawn(move || {
                if let Ok(status) = child.wait() {
                    reporter.report(status);
                }
            })?;
        Ok(handle)
    }
}

/// How a [`RecordingSpawner`] answers.
type SpawnBehaviour = dyn Fn(&SpawnRequest) -> io::Result<SpawnedChild> + Send + Sync;

/// A test double that records every request and answers through a closure, which can start an
/// in-process daemon, return a child that has already exited, or fail.
pub struct RecordingSpawner {
    requests: Mutex<Vec<SpawnRequest>>,
    behaviour: Box<SpawnBehaviour>,
}

impl fmt::Debug for RecordingSpawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingSpawner")
            .field("requests", &*lock(&self.requests))
            .finish_non_exhaustive()
    }
}

impl RecordingSpawner {
    pub fn new(
        behaviour: impl Fn(&SpawnRequest) -> io::Result<SpawnedChild> + Send + Sync + 'static,
    ) -> Self {
        RecordingSpawner {
            requests: Mutex::new(Vec::new()),
            behaviour: Box::new(behaviour),
        }
    }

    /// Every spawn yields a child that has already exited with `code` (an early exit).
    pub fn exiting(code: i32) -> Self {
        use std::os::unix::process::ExitStatusExt;
        RecordingSpawner::new(move |_| {
            let (child, reporter) = SpawnedChild::new(0);
            // Wait-status encoding: the exit code lives in bits 8..16.
            reporter.report(ExitStatus::from_raw((code & 0xff) << 8));
            Ok(child)
        })
    }

    pub fn requests(&self) -> Vec<SpawnRequest> {
        lock(&self.requests).clone()
    }
}

impl Spawner for RecordingSpawner {
    fn spawn_daemon(&self, req: SpawnRequest) -> io::Result<SpawnedChild> {
        let answer = (self.behaviour)(&req);
        lock(&self.requests).push(req);
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ad")
            .tempdir_in("/tmp")
            .unwrap()
    }

    /// Bounded polling for asynchronous OS state (never a fixed sleep).
    fn poll_until(mut cond: impl FnMut() -> bool) -> bool {
        for _ in 0..500 {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn manual_clock_is_shared_and_settable() {
        let clock = ManualClock::new(1_000);
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        assert_eq!(shared.now_unix_ms(), 1_000);
        clock.advance(Duration::from_millis(250));
        assert_eq!(shared.now_unix_ms(), 1_250);
        clock.set(5);
        assert_eq!(shared.now_unix_ms(), 5);
    }

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now_unix_ms() > 1_704_067_200_000);
    }

    #[test]
    fn static_addresses_can_change_between_calls() {
        let source = StaticAddresses::parse(["192.168.1.20"]).unwrap();
        let view: Arc<dyn AddressSource> = Arc::new(source.clone());
        assert_eq!(view.interfaces()[0].addr.to_string(), "192.168.1.20");
        assert!(view.interfaces()[0].up && !view.interfaces()[0].loopback);
        source.set(["10.0.0.2".parse().unwrap(), "fd00::1".parse().unwrap()]);
        let now: Vec<String> = view
            .interfaces()
            .iter()
            .map(|i| i.addr.to_string())
            .collect();
        assert_eq!(now, ["10.0.0.2", "fd00::1"]);
        assert!(StaticAddresses::parse(["not-an-ip"]).is_err());
    }

    #[test]
    fn os_addresses_do_not_fail() {
        // Whatever the host has, the list is well formed; selection always yields an address.
        let list = OsAddresses.interfaces();
        let chosen = crate::address::select_advertised(&list);
        assert!(!chosen.is_unspecified());
    }

    #[test]
    fn route_fallback_reports_only_concrete_addresses() {
        // May be empty on a host without routes; whatever it reports must be dialable.
        for i in route_source_addresses() {
            assert!(!i.addr.is_unspecified(), "{i:?}");
            assert!(i.up && !i.loopback);
        }
    }

    #[test]
    fn zombie_state_line_is_recognised() {
        assert!(status_is_zombie(
            "Name:\tx\nUmask:\t0022\nState:\tZ (zombie)\n"
        ));
        assert!(!status_is_zombie("Name:\tx\nState:\tS (sleeping)\n"));
        assert!(!status_is_zombie("Name:\tZ\n"));
    }

    #[test]
    fn os_probe_sees_this_process_and_rejects_bad_pids() {
        let probe = OsProcessProbe;
        assert!(probe.pid_alive(std::process::id()));
        assert!(!probe.is_zombie(std::process::id()));
        assert!(!probe.pid_alive(0));
        assert!(!probe.pid_alive(u32::MAX));
        assert!(probe.terminate(0).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn os_probe_detects_a_zombie_child() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        assert!(
            poll_until(|| OsProcessProbe.is_zombie(pid)),
            "child never became a zombie"
        );
        // kill(pid, 0) still succeeds on a zombie: that is why the zombie rule exists.
        assert!(OsProcessProbe.pid_alive(pid));
        child.wait().unwrap();
        assert!(!OsProcessProbe.is_zombie(pid));
    }

    #[test]
    fn os_probe_terminates_with_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        OsProcessProbe.terminate(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(15));
    }

    #[test]
    fn os_probe_reports_lock_state() {
        let tmp = temp();
        let path = tmp.path().join("daemon.pid");
        assert_eq!(OsProcessProbe.lock_held(&path), Some(false), "absent");
        let holder = std::fs::File::create(&path).unwrap();
        assert_eq!(OsProcessProbe.lock_held(&path), Some(false), "unlocked");
        holder.try_lock().unwrap();
        assert_eq!(OsProcessProbe.lock_held(&path), Some(true), "locked");
        // The probe must not have stolen or released the holder's lock.
        assert_eq!(OsProcessProbe.lock_held(&path), Some(true));
        holder.unlock().unwrap();
        assert_eq!(OsProcessProbe.lock_held(&path), Some(false));
    }

    #[test]
    fn fake_probe_is_table_driven() {
        let probe = FakeProcessProbe::new();
        probe.add_alive(10);
        probe.add_zombie(11);
        probe.set_lock("/s/daemon.pid", None);
        assert!(probe.pid_alive(10) && !probe.is_zombie(10));
        assert!(probe.pid_alive(11) && probe.is_zombie(11));
        assert!(!probe.pid_alive(12));
        assert_eq!(probe.lock_held(Path::new("/s/daemon.pid")), None);
        assert_eq!(probe.lock_held(Path::new("/other")), Some(false));
        probe.terminate(10).unwrap();
        assert!(probe.terminate(12).is_err());
        assert!(!probe.pid_alive(10));
        assert_eq!(probe.terminated(), [10, 12]);
    }

    #[test]
    fn peer_check_requires_the_same_euid() {
        let check = SameEuid::new();
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(check.euid(), me);
        assert!(check.allow(Some(me)));
        assert!(!check.allow(Some(me.wrapping_add(1))));
        assert!(!check.allow(None), "unknown peers are refused");
        assert!(FixedPeerCheck(true).allow(None));
        assert!(!FixedPeerCheck(false).allow(Some(me)));
    }

    #[test]
    fn stderr_is_trimmed_and_capped() {
        assert_eq!(trim_stderr("  oops\n"), "oops");
        let long = "é".repeat(5000);
        let cut = trim_stderr(&long);
        assert_eq!(cut.chars().count(), MAX_STDERR_CHARS);
    }

    #[tokio::test]
    async fn tokio_runner_passes_argv_and_env_without_a_shell() {
        let runner = TokioCommandRunner::new();
        let args = vec![
            "-c".to_owned(),
            r#"printf '%s|%s' "$1" "$APPDUCT_TEST_X"; echo '  err  ' >&2; exit 3"#.to_owned(),
            "sh".to_owned(),
            "a b; $(not expanded)".to_owned(),
        ];
        let env = vec![("APPDUCT_TEST_X".to_owned(), "y".to_owned())];
        let out = runner.run("sh", &args, &env).await.unwrap();
        assert_eq!(out.stdout, "a b; $(not expanded)|y");
        assert_eq!(out.stderr, "err");
        assert_eq!(out.code, Some(3));
        assert!(!out.success());
    }

    #[tokio::test]
    async fn tokio_runner_times_out() {
        let runner = TokioCommandRunner::with_timeout(Duration::from_millis(100));
        let err = runner
            .run("sleep", &["30".to_owned()], &[])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("sleep"), "{err}");
    }

    #[tokio::test]
    async fn tokio_runner_reports_a_missing_program() {
        let err = TokioCommandRunner::new()
            .run("/nonexistent/appduct-nothing", &[], &[])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn scripted_runner_answers_in_order_and_logs_argv() {
        let runner = ScriptedCommandRunner::new();
        runner.push_output(CommandOutput {
            code: Some(0),
            stdout: "ok".into(),
            stderr: String::new(),
        });
        runner.push_error(io::ErrorKind::PermissionDenied, "nope");
        let dynamic: &dyn CommandRunner = &runner;
        let args = vec!["devices".to_owned()];
        assert!(dynamic.run("adb", &args, &[]).await.unwrap().success());
        assert_eq!(
            dynamic.run("adb", &args, &[]).await.unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(
            dynamic.run("xcrun", &[], &[]).await.unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let log = runner.invocations();
        assert_eq!(log.len(), 3);
        assert_eq!(log[0].program, "adb");
        assert_eq!(log[0].args, ["devices"]);
        assert_eq!(log[2].program, "xcrun");
    }

    #[test]
    fn spawn_request_scrubs_the_version_override() {
        let base = vec![
            (OsString::from("PATH"), OsString::from("/bin")),
            (
                OsString::from(VERSION_OVERRIDE_ENV),
                OsString::from("9.9.9"),
            ),
            (OsString::from("APPDUCT_STATE_DIR"), OsString::from("/old")),
        ];
        let req =
            SpawnRequest::daemon_run_with(PathBuf::from("/bin/appduct"), Path::new("/s"), base);
        assert_eq!(req.program, Path::new("/bin/appduct"));
        assert_eq!(req.args, ["daemon", "run", "--state-dir", "/s"]);
        assert_eq!(
            req.env,
            [
                (OsString::from("PATH"), OsString::from("/bin")),
                (OsString::from("APPDUCT_STATE_DIR"), OsString::from("/s")),
            ]
        );
        assert_eq!(req.log_path(), Path::new("/s/daemon.log"));
        assert!(SpawnRequest::daemon_run(Path::new("/s")).is_ok());
    }

    #[test]
    fn reexec_spawner_detaches_logs_and_reaps() {
        let tmp = temp();
        let state = tmp.path().to_path_buf();
        std::fs::write(state.join("daemon.log"), b"earlier\n").unwrap();
        std::fs::set_permissions(
            state.join("daemon.log"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let script = r#"echo "cwd=$(pwd)"; echo "env=$APPDUCT_STATE_DIR ${APPDUCT_DAEMON_VERSION_OVERRIDE-unset}"; read -r line || echo "stdin=eof"; set -- $(cat /proc/$$/stat 2>/dev/null | cut -d' ' -f1,5); echo "pgrp=$1:$2"; echo err >&2; exit 7"#;
        let mut req = SpawnRequest::daemon_run_with(
            PathBuf::from("/bin/sh"),
            &state,
            vec![
                (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
                (
                    OsString::from(VERSION_OVERRIDE_ENV),
                    OsString::from("9.9.9"),
                ),
            ],
        );
        req.args = vec!["-c".into(), script.into()];
        let child = ReexecSpawner.spawn_daemon(req).unwrap();
        let status = child
            .wait_timeout(Duration::from_secs(10))
            .expect("child exits");
        assert_eq!(status.code(), Some(7));
        assert_eq!(child.try_wait().and_then(|s| s.code()), Some(7));

        let log = std::fs::read_to_string(state.join("daemon.log")).unwrap();
        assert!(log.starts_with("earlier\n"), "appended: {log}");
        let real = std::fs::canonicalize(&state).unwrap();
        assert!(log.contains(&format!("cwd={}", real.display())), "{log}");
        assert!(
            log.contains(&format!("env={} unset", state.display())),
            "{log}"
        );
        assert!(log.contains("stdin=eof"), "{log}");
        assert!(log.contains("err\n"), "{log}");
        if cfg!(target_os = "linux") {
            let pid = child.pid();
            assert!(log.contains(&format!("pgrp={pid}:{pid}")), "{log}");
        }
        let mode = std::fs::metadata(state.join("daemon.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn reexec_spawner_creates_the_log_0600() {
        let tmp = temp();
        let mut req =
            SpawnRequest::daemon_run_with(PathBuf::from("/bin/sh"), tmp.path(), Vec::new());
        req.args = vec!["-c".into(), "exit 0".into()];
        let child = ReexecSpawner.spawn_daemon(req).unwrap();
        assert!(child.wait_timeout(Duration::from_secs(10)).is_some());
        let mode = std::fs::metadata(tmp.path().join("daemon.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn recording_spawner_records_and_can_exit_early() {
        let spawner = RecordingSpawner::exiting(2);
        let req = SpawnRequest::daemon_run_with(PathBuf::from("/x"), Path::new("/s"), Vec::new());
        let child = spawner.spawn_daemon(req.clone()).unwrap();
        assert_eq!(child.try_wait().and_then(|s| s.code()), Some(2));
        assert_eq!(spawner.requests(), [req]);

        let failing = RecordingSpawner::new(|_| Err(io::Error::other("boom")));
        let req = SpawnRequest::daemon_run_with(PathBuf::from("/x"), Path::new("/s"), Vec::new());
        assert!(failing.spawn_daemon(req).is_err());
        assert_eq!(failing.requests().len(), 1);
    }

    #[test]
    fn spawned_child_reports_exit_once_reported() {
        use std::os::unix::process::ExitStatusExt;
        let (child, reporter) = SpawnedChild::new(42);
        assert_eq!(child.pid(), 42);
        assert_eq!(child.try_wait(), None);
        assert_eq!(child.wait_timeout(Duration::ZERO), None);
        reporter.report(ExitStatus::from_raw(0));
        assert!(child.try_wait().unwrap().success());
    }
}
