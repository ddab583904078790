#![no_main]
// Body and invariants: fuzz/bodies/src/deep_link.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::deep_link::run(data));
