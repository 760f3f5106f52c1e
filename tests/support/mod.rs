//! Helpers shared by the integration tests, one module for all of them:
//! here the basics every test binary wants (fixtures, a runtime, test
//! bytes, files, the binary); in submodules the helpers of one area
//! (`reference`: the reference reader and writer; `pipeline`: in-memory
//! sources and runs; `numpy`: .npy files and zip archives; `faults`: child
//! runs held mid-conversion; `gguf`: GGUF headers built by hand;
//! `formats`: ONNX models and Flax MessagePack files built by hand; `torch`:
//! PyTorch checkpoints built without torch; `moto`:
//! the local S3 server and plain requests to it). The counting allocator
//! is `tests/memory/alloc.rs`, in the one binary that installs it.
#![allow(dead_code, unused_imports)] // each test binary uses a different subset

pub mod faults;
pub mod formats;
pub mod gguf;
pub mod moto;
pub mod numpy;
pub mod pipeline;
pub mod reference;
pub mod torch;

use std::path::{Path, PathBuf};

/// The `convert` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_safetensors-convert");

/// `fixtures/` in the repository.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A current-thread runtime with I/O and time: deterministic scheduling.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// SplitMix64: the one deterministic generator for test data and choices.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `num/den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    /// One of `items`, uniformly.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Deterministic pseudo-random bytes, eight per SplitMix64 step.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A finished run's exit code; panics (showing the run) if a signal ended it.
pub fn code(o: &std::process::Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {o:?}"))
}

/// A finished run's standard error, as text.
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Converts `input` into a file of a temporary folder through the library
/// ([`convert_blocking`](safetensors_stream::convert_blocking)); its bytes.
pub fn convert_bytes(
    input: &Path,
    options: &safetensors_stream::ConvertOptions,
) -> Result<Vec<u8>, safetensors_stream::Error> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let output = safetensors_stream::convert::Output::File(out.clone());
    safetensors_stream::convert_blocking(&[input.to_path_buf()], &output, options)?;
    Ok(std::fs::read(out).unwrap())
}

/// Runs the binary: `input -o out`, asserting it succeeds and writes
/// exactly `want`.
pub fn converts_to(input: &Path, out: &Path, want: &[u8]) {
    let o = std::process::Command::new(BIN)
        .arg(input)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}: {}", input.display(), stderr(&o));
    assert!(std::fs::read(out).unwrap() == want, "{}", input.display());
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Every name in `dir`, hidden ones included, sorted: a failed run must
/// leave none behind.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
