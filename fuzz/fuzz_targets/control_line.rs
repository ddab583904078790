#![no_main]
// Body and invariants: fuzz/bodies/src/control_line.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::control_line::run(data));
