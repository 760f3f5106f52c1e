//! The Flax MessagePack walk: MsgpackSource::open on the bytes and every
//! tensor read to its end (see `msgpack_file` in fuzz/src/lib.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::msgpack_file(data);
});
