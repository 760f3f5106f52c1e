//! Quantized safetensors dequantized: MXFP4 blocks and E8M0 scales,
//! compressed-tensors packs, FP8 (FBGEMM, block, channel), NVFP4,
//! GPTQ/AWQ and bitsandbytes, each under a `config.json` the first byte
//! picks (see `quantized_record` in fuzz/src/lib.rs).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use safetensors_stream_fuzz::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).quantized_record(data);
});
