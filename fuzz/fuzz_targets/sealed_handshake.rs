#![no_main]
// Body and invariants: fuzz/bodies/src/sealed_handshake.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| appduct_fuzz::sealed_handshake::run(data));
