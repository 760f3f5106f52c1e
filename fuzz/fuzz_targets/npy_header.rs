//! The .npy prelude, header text (Python literal) and read_header.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::npy_header(data);
});
