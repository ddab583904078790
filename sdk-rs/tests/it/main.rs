//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod support;

mod client;
mod conformance;
mod sealed;
mod testing_hatch;
