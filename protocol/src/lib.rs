//! appduct v2 device protocol and appduct control-plane types.
//!
//! This crate is I/O-free: no sockets, no files, no async runtime. It holds every wire type,
//! codec and validator, so the daemon, the CLI, the MCP bridge and the Rust SDK share one
//! definition of the protocol. Specification: `shared/spec/02-device-protocol.md` (device wire)
//! and `shared/spec/03-control-rpc.md` (control plane).

pub mod bootstrap;
pub mod canonical;
pub mod close;
pub mod control;
pub mod descriptor;
pub mod errors;
pub mod frames;
pub mod glob;
pub mod ids;
pub mod jsonrpc;
pub mod limits;
pub mod link;
pub mod pin;
pub mod signature;
pub mod text;
