//! The peer check of the control socket (§C1.1): who may talk to the daemon.

use std::fmt;

/// Decides whether a control-socket peer may talk to the daemon (§C1.1).
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
            euid: appduct_client::platform::euid(),
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

// Unix-only: the uid comes from rustix.
#[cfg(all(test, unix))]
mod tests {
    use super::*;

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
}
