//! parse_file_bytes in strict, reference and source modes, with invariants
//! (strict acceptance implies reference acceptance; accepted headers re-encode).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::safetensors_header(data);
});
