#![no_main]
// Body and invariants: fuzz/bodies/src/mcp_args.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::mcp_args::run(data));
