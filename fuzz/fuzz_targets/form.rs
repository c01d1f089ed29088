//! cargo-fuzz target: the simulator's form decoder.
#![no_main]

include!("../bodies.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| form_body(data));
