//! The HDF5 reader: Hdf5Source::open on the bytes and every tensor read to
//! its end (see `hdf5_file` in fuzz/src/lib.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    safetensors_stream_fuzz::hdf5_file(data);
});
