//! The ONNX model walk: OnnxSource::open on the bytes (a model in a folder
//! with a data file beside it) and every initializer read to its end (see
//! `onnx_model` in fuzz/src/lib.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static HARNESS: OnceLock<safetensors_stream_fuzz::Harness> = OnceLock::new();
    HARNESS
        .get_or_init(safetensors_stream_fuzz::Harness::new)
        .onnx_model(data);
});
