//! Advertised-address selection (§D2.6): the pure choice of the address a native link carries,
//! over whatever an [`AddressSource`] reports, and the address source seam (ARCHITECTURE.md#test-layers) with the
//! OS enumeration and a settable test double.
//!
//! Selection skips interfaces that are not *running* (`IFF_RUNNING`: operationally up, which
//! implies administratively up) and loopback interfaces. Running rather than merely up is a
//! project decision: an interface without carrier cannot be reached by a phone, and `if-addrs`
//! reports only the operational state. An interface counts as loopback when it carries any
//! loopback address (127/8 or `::1`; in practice `lo` / `lo0`), and then every address on it is
//! loopback, as with the interface flag `IFF_LOOPBACK`: a non-127 address bound to `lo` is never
//! advertised.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

/// One address of one network interface, in the order the OS reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    /// Interface name (`eth0`, `en0`, …), for diagnostics only.
    pub name: String,
    pub addr: IpAddr,
    /// The interface is running (`IFF_RUNNING`: operationally up, so also administratively up).
    pub up: bool,
    /// The interface is a loopback interface (see the module doc).
    pub loopback: bool,
}

impl InterfaceAddr {
    /// An address on an interface that is up and not loopback.
    pub fn new(name: impl Into<String>, addr: IpAddr) -> Self {
        InterfaceAddr {
            name: name.into(),
            addr,
            up: true,
            loopback: false,
        }
    }

    /// Whether selection may consider this entry at all.
    fn usable(&self) -> bool {
        self.up && !self.loopback
    }
}

/// The address used when no interface offers a candidate.
pub const FALLBACK_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Picks the advertised address (§D2.6): the first address, in OS order, of the best class that
/// has one, skipping interfaces that are down or loopback; `127.0.0.1` when none qualifies.
pub fn select_advertised(interfaces: &[InterfaceAddr]) -> IpAddr {
    interfaces
        .iter()
        .filter(|i| i.usable())
        .filter_map(|i| class_of(i.addr).map(|class| (class, i.addr)))
        // min_by_key keeps the first of equal keys, which is OS order within a class.
        .min_by_key(|(class, _)| *class)
        .map_or(FALLBACK_ADDRESS, |(_, addr)| addr)
}

/// Candidate class of an address, 1 (best) to 4; `None` for addresses a device can never dial.
/// Besides the exclusions of §D2.6, unspecified, loopback, multicast and broadcast addresses are
/// never candidates (project reading: "any other" means any other unicast address).
fn class_of(addr: IpAddr) -> Option<u8> {
    match addr {
        IpAddr::V4(v4) => class_of_v4(v4),
        IpAddr::V6(v6) => class_of_v6(v6),
    }
}

fn class_of_v4(v4: Ipv4Addr) -> Option<u8> {
    let [a, b, _, _] = v4.octets();
    if v4.is_unspecified() || v4.is_loopback() || v4.is_multicast() || v4.is_broadcast() {
        return None;
    }
    // 172.17.0.0/16 is the default container bridge: never advertised.
    if a == 172 && b == 17 {
        return None;
    }
    if v4.is_private() {
        return Some(1);
    }
    // 100.64.0.0/10 (CGNAT) and 169.254.0.0/16 (link-local).
    let cgnat = a == 100 && (b & 0b1100_0000) == 64;
    if cgnat || v4.is_link_local() {
        return None;
    }
    Some(2)
}

fn class_of_v6(v6: Ipv6Addr) -> Option<u8> {
    if v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() {
        return None;
    }
    let first = v6.segments()[0];
    if first >> 8 == 0xfd {
        return Some(3);
    }
    let link_local = first & 0xffc0 == 0xfe80;
    if link_local || v6.to_ipv4_mapped().is_some() {
        return None;
    }
    Some(4)
}

/// Endpoint text form of §D2.6: `wss://192.168.50.12:8443`, `wss://[fd00::1]:8443`.
pub fn endpoint(addr: IpAddr, port: u16) -> String {
    format!("wss://{}", SocketAddr::new(addr, port))
}

/// Where the advertised address came from (`daemon.status.advertisedAddress.source`, §C8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AddressOrigin {
    /// `advertisedIp` in `config.json`.
    Config,
    /// Chosen by [`select_advertised`].
    Detected,
}

/// The address the next native link carries, in the shape of `daemon.status.advertisedAddress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AdvertisedAddress {
    pub address: IpAddr,
    /// 4 or 6.
    pub family: u8,
    pub source: AddressOrigin,
}

impl AdvertisedAddress {
    /// `advertisedIp` when configured, else detection over `source`.
    pub fn choose(configured: Option<IpAddr>, source: &dyn AddressSource) -> Self {
        let (address, origin) = match configured {
            Some(ip) => (ip, AddressOrigin::Config),
            None => (
                select_advertised(&source.interfaces()),
                AddressOrigin::Detected,
            ),
        };
        AdvertisedAddress {
            address,
            family: if address.is_ipv4() { 4 } else { 6 },
            source: origin,
        }
    }
}

/// The host's interface addresses in OS order, fed to [`select_advertised`].
pub trait AddressSource: Send + Sync + fmt::Debug {
    fn interfaces(&self) -> Vec<InterfaceAddr>;
}

/// OS interface enumeration through `getifaddrs` (the `if-addrs` crate), on Linux and macOS
/// alike: every address in OS order with its interface name, mapped by [`interface_addrs`]
/// (`up` is `IFF_RUNNING`, `loopback` is per interface). IPv6 link-local addresses are left out
/// by the crate; selection never picks them anyway. If the
/// enumeration fails, it falls back to the source address the routing table picks for a UDP
/// "connect" to a documentation address (no packet is sent): one address per family, reported
/// as up.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsAddresses;

impl AddressSource for OsAddresses {
    fn interfaces(&self) -> Vec<InterfaceAddr> {
        match if_addrs::get_if_addrs() {
            Ok(list) => interface_addrs(list.into_iter().map(|i| {
                let (ip, running) = (i.ip(), i.is_oper_up());
                (i.name, ip, running)
            })),
            Err(e) => {
                tracing::warn!(
                    "cannot enumerate interfaces ({e}); using the route to a documentation address instead"
                );
                route_source_addresses()
            }
        }
    }
}

/// Maps the OS's `(interface name, address, running)` triples, in OS order, to
/// [`InterfaceAddr`]s: `up` is the running state, and every address of an interface that carries
/// any loopback address is loopback (interface-level semantics, see the module doc).
pub fn interface_addrs(
    list: impl IntoIterator<Item = (String, IpAddr, bool)>,
) -> Vec<InterfaceAddr> {
    let list: Vec<(String, IpAddr, bool)> = list.into_iter().collect();
    let loopback_names: HashSet<&str> = list
        .iter()
        .filter(|(_, ip, _)| ip.is_loopback())
        .map(|(name, _, _)| name.as_str())
        .collect();
    list.iter()
        .map(|(name, ip, running)| InterfaceAddr {
            name: name.clone(),
            addr: *ip,
            up: *running,
            loopback: loopback_names.contains(name.as_str()),
        })
        .collect()
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

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn up(addr: &str) -> InterfaceAddr {
        InterfaceAddr::new("eth0", addr.parse().unwrap())
    }

    fn pick(addrs: &[&str]) -> String {
        let list: Vec<_> = addrs.iter().map(|a| up(a)).collect();
        select_advertised(&list).to_string()
    }

    #[test]
    fn class_order_table() {
        let cases: &[(&[&str], &str)] = &[
            // Class 1 beats everything, wherever it appears.
            (
                &["2001:db8::1", "fd00::5", "8.8.8.8", "192.168.1.20"],
                "192.168.1.20",
            ),
            (&["10.0.0.7"], "10.0.0.7"),
            (&["172.16.0.1"], "172.16.0.1"),
            (&["172.31.255.254"], "172.31.255.254"),
            // 172.17/16 is skipped; the next class wins.
            (&["172.17.0.1", "203.0.113.9"], "203.0.113.9"),
            (&["172.17.0.1"], "127.0.0.1"),
            // Class 2: public IPv4, not CGNAT or link-local.
            (&["fd12::1", "198.51.100.4"], "198.51.100.4"),
            (&["100.64.0.1", "169.254.3.4", "fd12::1"], "fd12::1"),
            (&["100.127.255.255", "100.128.0.1"], "100.128.0.1"),
            // Class 3 before class 4.
            (&["2001:db8::1", "fdaa::2"], "fdaa::2"),
            // fc00::/8 is not fd00::/8: it is "other IPv6".
            (&["fc00::1"], "fc00::1"),
            // Class 4 skips link-local and v4-mapped.
            (
                &["fe80::1", "::ffff:192.168.1.1", "2001:db8::9"],
                "2001:db8::9",
            ),
            (&["febf::1"], "127.0.0.1"),
            (&["fec0::1"], "fec0::1"),
            // Nothing usable.
            (&[], "127.0.0.1"),
            (
                &["127.0.0.2", "::1", "0.0.0.0", "224.0.0.1", "ff02::1"],
                "127.0.0.1",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(pick(input), *want, "{input:?}");
        }
    }

    #[test]
    fn first_in_os_order_within_a_class() {
        assert_eq!(pick(&["192.168.1.20", "10.0.0.1"]), "192.168.1.20");
        assert_eq!(pick(&["10.0.0.1", "192.168.1.20"]), "10.0.0.1");
        assert_eq!(pick(&["2001:db8::2", "2001:db8::1"]), "2001:db8::2");
    }

    #[test]
    fn down_and_loopback_interfaces_are_skipped() {
        let down = InterfaceAddr {
            up: false,
            ..up("192.168.1.5")
        };
        let lo = InterfaceAddr {
            loopback: true,
            ..up("10.1.1.1")
        };
        let list = vec![down, lo, up("203.0.113.1")];
        assert_eq!(select_advertised(&list).to_string(), "203.0.113.1");
        assert_eq!(select_advertised(&list[..2]).to_string(), "127.0.0.1");
    }

    fn os_entry(name: &str, ip: &str, running: bool) -> (String, IpAddr, bool) {
        (name.to_owned(), ip.parse().unwrap(), running)
    }

    #[test]
    fn loopback_is_a_property_of_the_interface() {
        let list = interface_addrs([
            os_entry("lo", "127.0.0.1", true),
            os_entry("lo", "10.9.9.9", true),
            os_entry("eth0", "192.168.1.5", true),
            os_entry("lo", "::1", true),
            os_entry("eth0", "2001:db8::5", true),
        ]);
        let flags: Vec<(&str, String, bool)> = list
            .iter()
            .map(|i| (i.name.as_str(), i.addr.to_string(), i.loopback))
            .collect();
        assert_eq!(
            flags,
            [
                ("lo", "127.0.0.1".to_owned(), true),
                // A VIP bound to `lo` is loopback too, so it is never advertised.
                ("lo", "10.9.9.9".to_owned(), true),
                ("eth0", "192.168.1.5".to_owned(), false),
                ("lo", "::1".to_owned(), true),
                ("eth0", "2001:db8::5".to_owned(), false),
            ]
        );
        assert_eq!(select_advertised(&list).to_string(), "192.168.1.5");
        let only_lo = interface_addrs([
            os_entry("lo", "10.9.9.9", true),
            os_entry("lo", "127.0.0.1", true),
        ]);
        assert!(only_lo.iter().all(|i| i.loopback));
        assert_eq!(select_advertised(&only_lo).to_string(), "127.0.0.1");
    }

    #[test]
    fn up_is_the_running_state() {
        let list = interface_addrs([
            os_entry("eth0", "192.168.1.5", false),
            os_entry("wlan0", "10.0.0.7", true),
        ]);
        assert_eq!(list.iter().map(|i| i.up).collect::<Vec<_>>(), [false, true]);
        assert!(list.iter().all(|i| !i.loopback));
        // An interface without carrier is skipped.
        assert_eq!(select_advertised(&list).to_string(), "10.0.0.7");
        assert_eq!(select_advertised(&list[..1]).to_string(), "127.0.0.1");
    }

    #[test]
    fn endpoint_text_form_brackets_ipv6() {
        assert_eq!(
            endpoint("192.168.50.12".parse().unwrap(), 8443),
            "wss://192.168.50.12:8443"
        );
        assert_eq!(
            endpoint("fd00::1".parse().unwrap(), 8443),
            "wss://[fd00::1]:8443"
        );
    }

    #[test]
    fn configured_address_wins_and_is_labelled() {
        let source = StaticAddresses::new(["192.168.1.20".parse().unwrap()]);
        let configured = AdvertisedAddress::choose(Some("fd00::1".parse().unwrap()), &source);
        assert_eq!(
            serde_json::to_value(configured).unwrap(),
            serde_json::json!({"address": "fd00::1", "family": 6, "source": "config"})
        );
        let detected = AdvertisedAddress::choose(None, &source);
        assert_eq!(
            serde_json::to_value(detected).unwrap(),
            serde_json::json!({"address": "192.168.1.20", "family": 4, "source": "detected"})
        );
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
        let chosen = select_advertised(&list);
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

    #[cfg(target_os = "linux")]
    #[test]
    fn the_os_reports_loopback() {
        // Every Linux network namespace has `lo` with 127.0.0.1, flagged loopback.
        let list = OsAddresses.interfaces();
        let lo = list
            .iter()
            .find(|i| i.addr == IpAddr::V4(Ipv4Addr::LOCALHOST))
            .expect("127.0.0.1 is listed");
        assert!(lo.loopback, "{lo:?}");
    }
}
