#![no_main]
// Body and invariants: fuzz/bodies/src/device_frame.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::device_frame::run(data));
