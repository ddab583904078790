//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod support;

mod calls;
mod cancellation;
mod connect;
mod consent_channels;
mod errors;
mod exit_grace;
mod fake_daemon_guard;
mod http;
mod leases;
mod malformed_requests;
mod roots_cache;
mod security_args;
mod security_connect;
mod security_consent;
mod status_connection;
mod surface;
mod tool_cache;
mod waits;
