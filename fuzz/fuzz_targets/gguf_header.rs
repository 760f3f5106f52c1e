//! The GGUF header parser, then GgufSource::open on the same bytes and
//! every tensor read to its end: no panic, no allocation beyond what the
//! input's own bytes justify, every tensor exactly its planned length.
#![no_main]

use std::io::{Read, Write};

use libfuzzer_sys::fuzz_target;
use safetensors_stream::source::gguf::{header::read_header, GgufSource};
use safetensors_stream::source::{Source, SourceOptions};

fuzz_target!(|data: &[u8]| {
    let parsed = read_header(data, data.len() as u64);
    let mut file = tempfile::tempfile().expect("a temp file");
    file.write_all(data).expect("written");
    let opened = GgufSource::open(file, data.len() as u64, "fuzz.gguf", &SourceOptions::default());
    // The parser and the source agree on what is acceptable.
    assert_eq!(parsed.is_ok(), opened.is_ok());
    let Ok(src) = opened else { return };
    for (k, t) in src.tensors().iter().enumerate() {
        let want = t.byte_len().expect("a listed tensor has a length");
        // Quantized tensors: the blocking reader; plain ones lie in the file.
        if let Some(open) = src.open_blocking(k) {
            let (r, _) = open().expect("opened");
            let mut n = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            let mut r = r;
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(got) => n += got as u64,
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(n, want, "{}", t.name);
        } else {
            let span = src.file_span(k).expect("a plain tensor has a span");
            assert_eq!(span.len, want, "{}", t.name);
            assert!(span.offset + span.len <= data.len() as u64);
        }
    }
});
