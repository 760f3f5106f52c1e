//! The zip central directory, NpzSource::open, and every member read to its end.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use safetensors_stream_fuzz::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).zip_directory(data);
});
