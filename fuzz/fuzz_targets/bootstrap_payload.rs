#![no_main]
// Body and invariants: fuzz/bodies/src/bootstrap_payload.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::bootstrap_payload::run(data));
