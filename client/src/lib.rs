//! The appduct control client and the client side of the daemon's local files: everything the
//! CLI and the MCP bridge run in their own process to reach the daemon (ARCHITECTURE.md#the-daemon).
//!
//! - `client`: the typed control client, connect-or-spawn, version handshake, correlation,
//!   subscriptions;
//! - `link_flow`: minting a link and opening it (device delivery, web link, QR), revoking it when
//!   a later step fails or the request is cancelled; `delivery`, `project` and `qr` are its parts;
//! - `session_wait`: what the waits for a claimed, ready session share (refusals, timeout hints,
//!   the registry grace);
//! - the local files both sides agree on: `state_dir` (layout, resolution, checks), `config`,
//!   `pidfile` (the daemon's single-instance lock), `spawn_lock`;
//! - the seams the client side reaches the outside world through: `process` (process probe),
//!   `spawn` (spawner), `command_runner` (external commands);
//! - `picture`: small PNGs (the pairing QR as an image, the playground's counter chart);
//! - `envflag`, `random`, `timestamp`: one home each, shared with the daemon.
//!
//! This crate never depends on `appduct-daemon`; the daemon depends on it for the local files,
//! the CSPRNG and timestamps. Module map: `ARCHITECTURE.md`.

use std::future::Future;
use std::pin::Pin;

pub mod client;
pub mod command_runner;
pub mod config;
pub mod delivery;
pub mod envflag;
pub mod http_token;
pub mod link_flow;
pub mod picture;
pub mod pidfile;
pub mod platform;
pub mod process;
pub mod project;
pub mod qr;
pub mod random;
pub mod session_wait;
pub mod spawn;
pub mod spawn_lock;
pub mod state_dir;
pub mod timestamp;

/// A boxed `Send` future, so the seams stay usable as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
