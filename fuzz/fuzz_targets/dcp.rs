//! A distributed checkpoint's `.metadata`: its unpickling with DCP's
//! classes, the chunk layout it claims, and the whole conversion.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use safetensors_stream_fuzz::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).dcp(data);
});
