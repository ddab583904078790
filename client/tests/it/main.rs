//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod config_doc;
mod control_version;
mod security_delivery;
