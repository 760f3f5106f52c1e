//! GGUF files built by hand, for the tests of hostile headers (the
//! functional ones in `it/gguf.rs`, those that measure the heap in
//! `memory/gguf.rs`).

use std::path::PathBuf;

use safetensors_stream::source::gguf::header::read_header;
use safetensors_stream::Error;

/// `fixtures/gguf/NAME`.
pub fn fixture(name: &str) -> PathBuf {
    super::fixtures().join("gguf").join(name)
}

/// A GGUF file built by hand, little-endian unless `big`.
pub struct Builder {
    pub big: bool,
    pub out: Vec<u8>,
}

impl Builder {
    pub fn new(version: u32, tensors: u64, kvs: u64, big: bool) -> Self {
        let mut b = Builder {
            big,
            out: b"GGUF".to_vec(),
        };
        b.u32(version).u64(tensors).u64(kvs);
        b
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
        self
    }
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `data`.
    pub fn data(&mut self, data: &[u8]) -> Vec<u8> {
        while self.out.len() % 32 != 0 {
            self.out.push(0);
        }
        self.out.extend_from_slice(data);
        self.out.clone()
    }
}

/// Reads `bytes` as a GGUF header.
pub fn parse(bytes: &[u8]) -> Result<(), Error> {
    read_header(bytes, bytes.len() as u64).map(|_| ())
}
