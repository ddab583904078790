//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod support;

mod approvals;
mod audit;
mod cli_args;
mod cli_reference;
mod daemon_wire;
mod doctor;
mod http;
mod human_snapshots;
mod link_parity;
mod mcp_host;
mod mcp_install;
mod playground;
mod policy;
mod security_delivery;
mod snapshot_from;
mod terminal;
mod watch;
