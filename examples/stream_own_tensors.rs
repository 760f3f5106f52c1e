//! Streams three F32 tensors of your own into a safetensors file, a chunk
//! at a time: no tensor is ever whole in memory.
//!
//! ```text
//! cargo run --release --example stream_own_tensors -- OUT MIB
//! ```
//!
//! Writes `layer.{k}.weight` for k = 0, 1, 2, each MIB MiB, of shape
//! `[1024, MIB * 256]`, element i equal to `(i % 1000) * (k + 1)`.

use std::process::ExitCode;

use safetensors_stream::{Dtype, TensorMeta, Writer, WriterOptions};

/// Elements produced per chunk: 64 Ki elements, 256 KiB.
const CHUNK: u64 = 64 * 1024;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, mib] = args.as_slice() else {
        eprintln!("usage: stream_own_tensors OUT MIB");
        return ExitCode::from(2);
    };
    let Ok(mib) = mib.parse::<u64>() else {
        eprintln!("stream_own_tensors: MIB must be a whole number, not {mib:?}");
        return ExitCode::from(2);
    };
    match write(out, mib) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream_own_tensors: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(out: &str, mib: u64) -> safetensors_stream::Result<()> {
    let tensors = (0..3).map(|k| TensorMeta::new(name(k), Dtype::F32, [1024, mib * 256]));
    let mut writer = Writer::create(out, tensors, WriterOptions::default())?;
    let elements = 1024 * mib * 256;
    let mut chunk = Vec::with_capacity(CHUNK as usize * 4);
    // The file's order is fixed by the header; canonical order sorts by name.
    for k in 0..3u64 {
        let mut i = 0;
        while i < elements {
            let end = (i + CHUNK).min(elements);
            chunk.clear();
            for e in i..end {
                let value = ((e % 1000) * (k + 1)) as f32;
                chunk.extend_from_slice(&value.to_le_bytes());
            }
            writer.write(&name(k), &chunk)?;
            i = end;
        }
    }
    writer.finish()?;
    Ok(())
}

fn name(k: u64) -> String {
    format!("layer.{k}.weight")
}
