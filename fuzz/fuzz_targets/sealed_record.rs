#![no_main]
// Body and invariants: fuzz/bodies/src/sealed_record.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::sealed_record::run(data));
