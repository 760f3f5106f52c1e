//! The restricted unpickler and the naming of its value tree as tensors.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::pickle(data);
});
