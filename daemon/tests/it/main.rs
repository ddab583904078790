//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod calls_support;
mod control_support;
mod daemon_support;
mod engine_support;
mod listener_support;
mod tls_support;

mod audit_log;
mod calls_approvals;
mod calls_cancel;
mod calls_content;
mod calls_pipeline;
mod calls_policy;
mod calls_races;
mod calls_sdk;
mod calls_transitions;
mod consent_records;
mod control_client;
mod control_idle;
mod control_server;
mod control_uds;
mod daemon_control;
mod daemon_devices;
mod daemon_drain;
mod daemon_leaf;
mod daemon_lifecycle;
mod daemon_sealed;
mod engine_events;
mod engine_faults;
mod engine_protocol;
mod engine_refusal_reports;
mod engine_refusals;
mod engine_sessions;
mod listener_web;
mod listener_wss;
mod policy_eval;
mod security_files;
mod security_keys;
mod security_limits;
mod security_local;
mod security_preclaim;
mod security_replies;
mod security_ws_violations;
mod tls_handshakes;
