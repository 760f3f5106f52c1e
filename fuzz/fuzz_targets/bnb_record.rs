//! bitsandbytes' packed `quant_state` JSON record (quantized safetensors).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::bnb_record(data);
});
