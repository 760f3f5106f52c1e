//! The GGUF header parser, then GgufSource::open on the same bytes and
//! every tensor read to its end (see `gguf_header` in fuzz/src/lib.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::gguf_header(data);
});
