#![no_main]
// Body and invariants: fuzz/bodies/src/doctor_dex.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::doctor_dex::run(data));
