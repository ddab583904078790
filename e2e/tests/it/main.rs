//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod audit_settled;
mod calls;
mod crate_metadata;
mod dependency_rules;
mod devices;
mod drift;
mod hostility;
mod journeys;
mod leases;
mod lifecycle;
mod mcp;
mod mcp_consent;
mod mcp_http;
mod mcp_official;
mod mcp_rmcp;
mod npm_package;
mod pictures;
mod ready_waits;
mod refusal_reports;
mod registry;
mod reply_bounds;
mod sdk_device;
mod sealed_device;
mod security;
mod soak;
mod ts_sdk;
mod validation;
