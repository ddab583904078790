//! The appduct daemon: one long-lived process per user and state directory that holds app
//! sessions, and the one typed control client the CLI and the MCP bridge use to reach it.
//! Module map: `ARCHITECTURE.md`; specification: `shared/spec/01-architecture.md` §3.4.

pub mod address;
pub mod audit;
pub mod calls;
pub mod client;
pub mod config;
pub mod consent;
pub mod control_server;
pub mod daemon;
pub mod delivery;
pub mod device_socket;
pub mod envflag;
pub mod events;
pub mod handlers;
pub mod links;
pub mod listener;
pub mod pidfile;
pub mod policy;
pub mod project;
pub mod qr;
pub mod quiet_unix;
pub mod random;
pub mod seams;
pub mod sessions;
pub mod spawn_lock;
pub mod state_dir;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timestamp;
pub mod tls;
