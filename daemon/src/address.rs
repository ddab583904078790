//! Advertised-address selection (02 §6): the pure choice of the address a native link carries,
//! over whatever an [`AddressSource`](crate::seams::AddressSource) reports.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use serde::Serialize;

use crate::seams::AddressSource;

/// One address of one network interface, in the order the OS reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    /// Interface name (`eth0`, `en0`, …), for diagnostics only.
    pub name: String,
    pub addr: IpAddr,
    /// The interface is administratively up.
    pub up: bool,
    /// The interface is a loopback interface.
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

/// Picks the advertised address (02 §6): the first address, in OS order, of the best class that
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
/// Besides the exclusions of 02 §6, unspecified, loopback, multicast and broadcast addresses are
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

/// Endpoint text form of 02 §6: `wss://192.168.50.12:8443`, `wss://[fd00::1]:8443`.
pub fn endpoint(addr: IpAddr, port: u16) -> String {
    format!("wss://{}", SocketAddr::new(addr, port))
}

/// Where the advertised address came from (`daemon.status.advertisedAddress.source`, 03 §9.2).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seams::StaticAddresses;

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
}
