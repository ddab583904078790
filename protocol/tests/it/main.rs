//! Every integration test of this crate in one binary (one link instead of one per file):
//! one module per former test file, the shared support modules beside them.

mod conformance;
mod control_plane;
mod doc_examples;
mod doc_refs;
mod prop_canonical;
mod prop_codecs;
mod prop_frames;
mod prop_glob;
mod prop_signature;
mod schemas;
mod sealed;
mod security_tokens;
