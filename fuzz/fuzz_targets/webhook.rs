//! cargo-fuzz target: webhook signature header, verification and payload parsing.
#![no_main]

include!("../bodies.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| webhook_body(data));
