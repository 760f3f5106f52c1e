//! The whole conversion of arbitrary bytes into memory: as a file, as a raw
//! dump laid out by its first bytes, and gzip-wrapped (stream path).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use safetensors_stream_fuzz::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).convert_bytes(data);
});
