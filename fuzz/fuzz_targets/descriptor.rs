#![no_main]
// Body and invariants: fuzz/bodies/src/descriptor.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::descriptor::run(data));
