//! The appduct daemon, server side only: one long-lived process per user and state directory
//! that holds app sessions and serves the control socket. The client side (the typed control
//! client, connect-or-spawn, delivery) and the local files both sides agree on (state dir,
//! config, pidfile) live in `appduct-client`, which this crate depends on.
//! Module map: `ARCHITECTURE.md` ("The daemon").

pub mod address;
#[cfg(feature = "count-allocs")]
pub mod alloc_count;
pub mod approvals;
pub mod arguments;
pub mod audit;
pub mod calls;
pub mod clock;
pub mod consent;
pub mod control_server;
pub mod daemon;
pub mod device_socket;
pub mod events;
pub mod handlers;
pub mod http_api;
pub mod links;
pub mod listener;
pub mod policy;
pub mod policy_control;
pub mod preclaim;
#[cfg(unix)]
pub mod quiet_unix;
pub mod rng;
pub mod sessions;
pub mod tcp_peer;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
#[cfg(all(test, windows))]
mod windows_state_dir_tests;
