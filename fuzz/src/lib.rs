//! The fuzz harness: one function per fuzz target, each feeding arbitrary
//! bytes to a parser or to the whole conversion and checking invariants.
//!
//! Shared by the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`) and by the
//! regression test `tests/fuzz_regressions.rs`, which includes this file
//! with `#[path]` and replays `fixtures/fuzz-regressions/` through it, so a
//! crash found by fuzzing is replayed through exactly the same calls.
//!
//! Every function returns the outcome of each step it ran (`Ok` or the
//! typed error) so a test can check what was refused and why. A panic, a
//! hang or a failed invariant (an `assert!` here) is a bug.
//!
//! Uses only crates the main package already depends on (tempfile, tokio,
//! flate2), so the test build needs nothing new.

// `cfg(fuzzing)`: set by cargo-fuzz, unknown to `cargo test`, which
// includes this file too.
#![allow(unexpected_cfgs)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors_stream::convert::{convert_sources, plan_sources, ConvertOptions, Output};
use safetensors_stream::header::{encode, parse_file_bytes, Header, Order, Rules, TensorMeta};
use safetensors_stream::internals::npy_header::{
    parse_header_text, parse_prelude, read_header, Prelude,
};
use safetensors_stream::internals::write_shard;
use safetensors_stream::internals::zip::read_directory;
use safetensors_stream::internals::NpzSource;
use safetensors_stream::plan::PlanOptions;
use safetensors_stream::sink::SinkOptions;
use safetensors_stream::source::open_input;
use safetensors_stream::source::{NpyOptions, Source, SourceOptions};
use safetensors_stream::source::{RawSpec, RawTensor};
use safetensors_stream::{
    internals::{detect, hex_preview, SNIFF_LEN},
    source::Format,
};
use safetensors_stream::{Dtype, Error, Result};

/// The largest single allocation a fuzz target may make: libFuzzer's own
/// `-malloc_limit_mb` needs a sanitizer's malloc hooks, which the default
/// `-s none` build has not, so the targets count for themselves. A parser
/// that allocates from a header's claim asks for more than this on some
/// input; the allocator then aborts, and libFuzzer keeps the input as a crash.
#[cfg(fuzzing)]
pub const MALLOC_LIMIT: usize = 512 << 20;

/// The system allocator, aborting on one allocation above [`MALLOC_LIMIT`].
#[cfg(fuzzing)]
struct CappedAlloc;

#[cfg(fuzzing)]
impl CappedAlloc {
    fn check(size: usize) {
        if size > MALLOC_LIMIT {
            // No formatting: allocating here would recurse.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"==fuzz== a single allocation above MALLOC_LIMIT (512 MiB): aborting\n",
            );
            std::process::abort();
        }
    }
}

#[cfg(fuzzing)]
unsafe impl std::alloc::GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::check(layout.size());
        std::alloc::System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::check(layout.size());
        std::alloc::System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        Self::check(new);
        std::alloc::System.realloc(ptr, layout, new)
    }
}

#[cfg(fuzzing)]
#[global_allocator]
static CAPPED: CappedAlloc = CappedAlloc;

/// What one fuzz input did: each step's name and its outcome.
pub type Outcomes = Vec<(&'static str, Result<()>)>;

/// A scratch folder for the inputs written to disk, and a current-thread
/// runtime for the async pipeline. Create one and reuse it for every input.
pub struct Harness {
    dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
}

impl Harness {
    /// A fresh scratch folder (removed when the harness is dropped) and runtime.
    pub fn new() -> Harness {
        let dir = tempfile::Builder::new()
            .prefix("safetensors-stream-fuzz-")
            .tempdir()
            .expect("a scratch folder");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
        Harness { dir, rt }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).expect("writing a scratch input");
        path
    }

    /// `zip_directory`: the bytes as an archive: its central directory,
    /// then the whole .npz source (every member's npy header), then every
    /// member's data read to its end (sizes and CRC checked on the way).
    pub fn zip_directory(&self, data: &[u8]) -> Outcomes {
        let path = self.write("archive.npz", data);
        let file = File::open(&path).expect("reopening the scratch input");
        let len = data.len() as u64;
        let mut out: Outcomes = Vec::new();
        let dir = read_directory(&file, len);
        if let Ok((entries, dir_offset)) = &dir {
            for e in entries {
                assert!(
                    e.local_offset.saturating_add(e.compressed) <= *dir_offset,
                    "member {e:?} accepted past the directory at {dir_offset}"
                );
            }
            assert!(*dir_offset <= len, "directory offset past the end");
        }
        out.push(("read_directory", dir.map(drop)));
        for skip_non_npy in [false, true] {
            let npy = NpyOptions::default().skip_non_npy(skip_non_npy);
            let options = SourceOptions::default().npy(npy);
            let file = File::open(&path).expect("reopening the scratch input");
            match NpzSource::open(file, len, "archive.npz", &options) {
                Ok(mut src) => {
                    let result = self.rt.block_on(read_all(&mut src));
                    out.push(("npz_read", result));
                }
                Err(e) => out.push(("npz_open", Err(e))),
            }
        }
        out
    }

    /// `convert_bytes`: the whole conversion of the bytes, as a file
    /// (detected by its magic), as a raw dump laid out by its first bytes,
    /// and gzip-wrapped; the file also cast (`--cast-all`), sharded small and
    /// in input order; into memory, each output checked as a safetensors file.
    pub fn convert_bytes(&self, data: &[u8]) -> Outcomes {
        let mut out: Outcomes = Vec::new();
        let plain = SourceOptions::default();
        let path = self.write("input.npy", data);
        out.push(("file", self.convert(&path, &plain, PlanOptions::default())));
        // The same file cast, sharded small and kept in input order.
        let layout = PlanOptions::default()
            .cast_all(Some(
                [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64][data.len() % 4],
            ))
            .max_shard_size(Some(1 + 8 * data.first().copied().unwrap_or(0) as u64))
            .order(Order::AsGiven);
        out.push(("file_cast_shards", self.convert(&path, &plain, layout)));
        if QUANTIZED_MARKS
            .iter()
            .any(|m| data.windows(m.len()).any(|w| w == *m))
        {
            // Named like a quantized checkpoint: dequantized too (each
            // scheme's auxiliaries read and checked, every piece dequantized).
            let dequantize = plain.clone().dequantize(Some(Dtype::F16));
            out.push((
                "dequantize",
                self.convert(&path, &dequantize, PlanOptions::default()),
            ));
        }
        let path = self.write("input.npy.gz", &gzip(data));
        out.push(("gzip", self.convert(&path, &plain, PlanOptions::default())));
        if let Some((spec, dump)) = raw_spec(data) {
            let raw = SourceOptions::default().raw(Some(spec));
            let path = self.write("dump.bin", dump);
            out.push(("raw", self.convert(&path, &raw, PlanOptions::default())));
            let path = self.write("dump.bin.gz", &gzip(dump));
            out.push((
                "raw_gzip",
                self.convert(&path, &raw, PlanOptions::default()),
            ));
        }
        out
    }

    /// The conversion twice: into memory through the async sink, and into
    /// a file, where the file-to-file fast path copies what lies in files.
    /// Both drivers share one element pipeline, so they must agree: the
    /// same bytes, or the same kind of error.
    fn convert(&self, path: &Path, source: &SourceOptions, plan: PlanOptions) -> Result<()> {
        let options = ConvertOptions::default()
            .source(source.clone())
            // An input with no tensors still exercises the writer.
            .plan(plan.allow_empty(true))
            .sink(SinkOptions::default().buffer_size(64 << 10))
            .sync(false);
        let memory = self.convert_to_memory(path, &options);
        let file = self.convert_to_file(path, &options);
        match (&memory, &file) {
            // Too large to write to a file: only the in-memory driver ran.
            (_, None) => {}
            (Ok(Some(a)), Some(Ok(b))) => assert!(a == b, "the fast path wrote other bytes"),
            (Ok(_), Some(Ok(_))) => {}
            (Err(a), Some(Err(b))) => assert_eq!(
                std::mem::discriminant(a.kind()),
                std::mem::discriminant(b.kind()),
                "the fast path failed otherwise: {a} / {b}"
            ),
            _ => panic!("the drivers disagree: into memory {memory:?}, into a file {file:?}"),
        }
        memory.map(drop)
    }

    /// open_input + plan + write_shard for every shard, into memory; a
    /// successful conversion must be a valid file that matches its plan.
    /// Returns the shards' bytes, unless one was too large to keep.
    fn convert_to_memory(
        &self,
        path: &Path,
        options: &ConvertOptions,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        self.rt.block_on(async {
            let (mut sources, plan) = open_and_plan(path, options).await?;
            let mut files = Some(Vec::new());
            for shard in &plan.shards {
                if shard.file_len() <= MAX_KEPT {
                    let file =
                        write_shard(Vec::new(), shard, &mut sources, options.sink, "mem").await?;
                    assert_eq!(file.len() as u64, shard.file_len(), "output length");
                    let written = parse_file_bytes(&file, Rules::STRICT)
                        .expect("a conversion wrote an invalid safetensors file");
                    assert_eq!(
                        &written,
                        shard.header.header(),
                        "output header differs from plan"
                    );
                    if let Some(f) = &mut files {
                        f.push(file);
                    }
                } else {
                    let sink = tokio::io::sink();
                    write_shard(sink, shard, &mut sources, options.sink, "sink").await?;
                    files = None;
                }
            }
            Ok(files)
        })
    }

    /// The whole `convert` into a file (shards and index when sharded);
    /// returns the shards' bytes, or `None` when the plan is too large to
    /// write (then nothing was converted: there is nothing to compare).
    fn convert_to_file(
        &self,
        path: &Path,
        options: &ConvertOptions,
    ) -> Option<Result<Vec<Vec<u8>>>> {
        self.rt.block_on(async {
            let (mut sources, plan) = match open_and_plan(path, options).await {
                Ok(opened) => opened,
                Err(e) => return Some(Err(e)),
            };
            if plan.file_len() > MAX_KEPT {
                return None;
            }
            let out_dir = tempfile::tempdir_in(self.dir.path()).expect("an output folder");
            let out = Output::File(out_dir.path().join("out.safetensors"));
            let report = match convert_sources(&mut sources, &out, options).await {
                Ok(report) => report,
                Err(e) => return Some(Err(e)),
            };
            let shards = report
                .outputs
                .iter()
                .filter(|o| !o.path.ends_with(".index.json"));
            Some(Ok(shards
                .map(|o| std::fs::read(&o.path).expect("reading an output"))
                .collect()))
        })
    }
}

/// Opens the input and plans its conversion: the first steps of both drivers.
async fn open_and_plan(
    path: &Path,
    options: &ConvertOptions,
) -> Result<(Vec<Box<dyn Source>>, safetensors_stream::plan::Plan)> {
    let quiet = |_: &safetensors_stream::Note| {};
    let src = open_input(path, &options.source, &quiet).await?;
    let sources: Vec<Box<dyn Source>> = vec![src];
    let plan = plan_sources(&sources, options)?;
    Ok((sources, plan))
}

/// The `.distcp` files of fixture `shard0` (2 ranks, `Shard(0)`), beside
/// which the `dcp` target puts its `.metadata`.
const DCP_FILES: [(&str, &[u8]); 2] = [
    (
        "__0_0.distcp",
        include_bytes!("../../fixtures/dcp/shard0/__0_0.distcp"),
    ),
    (
        "__1_0.distcp",
        include_bytes!("../../fixtures/dcp/shard0/__1_0.distcp"),
    ),
];

impl Harness {
    /// `dcp`: the bytes as a distributed checkpoint's `.metadata` (a pickle
    /// of DCP's classes), beside shard0's `.distcp` files: the checkpoint
    /// opened (chunks checked to tile each tensor, items placed in their
    /// files), then converted whole. Checks: what is opened plans no more
    /// tensor bytes than the files hold (each chunk in an item of its
    /// own), and the two conversion drivers agree.
    pub fn dcp(&self, data: &[u8]) -> Outcomes {
        let dir = self.dir.path().join("checkpoint");
        std::fs::create_dir_all(&dir).expect("a scratch checkpoint folder");
        let mut on_disk = 0u64;
        for (name, bytes) in DCP_FILES {
            let path = dir.join(name);
            if !path.exists() {
                std::fs::write(&path, bytes).expect("writing a .distcp file");
            }
            on_disk += bytes.len() as u64;
        }
        std::fs::write(dir.join(".metadata"), data).expect("writing .metadata");
        let mut out: Outcomes = Vec::new();
        let quiet = |_: &safetensors_stream::Note| {};
        let opened = self
            .rt
            .block_on(open_input(&dir, &SourceOptions::default(), &quiet));
        if let Ok(src) = &opened {
            let planned = src.tensors().iter().fold(0u64, |sum, t| {
                let bytes = t.byte_len().expect("an opened tensor has a length");
                sum.saturating_add(bytes)
            });
            assert!(
                planned <= on_disk,
                "{planned} tensor bytes planned from {on_disk} bytes of items"
            );
        }
        out.push(("open", opened.map(drop)));
        let plain = SourceOptions::default();
        out.push((
            "convert",
            self.convert(&dir, &plain, PlanOptions::default()),
        ));
        out
    }
}

/// `(name, Some(text))` of `fixtures/quantized/NAME/config.json`.
macro_rules! fixture_config {
    ($name:literal) => {
        (
            $name,
            Some(include_str!(concat!(
                "../../fixtures/quantized/",
                $name,
                "/config.json"
            ))),
        )
    };
}

/// The `config.json` files `quantized_record` writes beside its model, the
/// first byte of an input choosing one: every scheme's fixture config
/// (the keys that pick a scheme, a bit width, a group or a block size), and
/// no config at all (the tensors alone say the scheme). The low four bits
/// of the byte pick among the first sixteen, bit 6 among the rest
/// ([`quant_config`]): inputs saved before the table grew keep theirs.
pub const QUANT_CONFIGS: [(&str, Option<&str>); 18] = [
    ("none", None),
    fixture_config!("awq"),
    fixture_config!("bnb-4bit"),
    fixture_config!("bnb-int8"),
    fixture_config!("fbgemm-fp8"),
    fixture_config!("fp8-compressed-tensors"),
    fixture_config!("fp8-sharded"),
    fixture_config!("gptq"),
    fixture_config!("gptq-8bit-v2"),
    fixture_config!("int-quantized"),
    fixture_config!("mxfp4-compressed-tensors"),
    fixture_config!("mxfp4"),
    fixture_config!("nvfp4-compressed-tensors"),
    fixture_config!("nvfp4-modelopt"),
    fixture_config!("pack-quantized"),
    // A hostile config: a block and a group of one, GPTQ at 3 bits.
    (
        "hostile",
        Some(
            r#"{"quantization_config": {"quant_method": "gptq", "bits": 3, "group_size": 1,
            "weight_block_size": [1, 1], "config_groups": {"g": {"weights": {"num_bits": 2}}}}}"#,
        ),
    ),
    // The compressed-tensors block strategies, MXFP8 and MXFP6 (added
    // session 12): one config declaring each.
    fixture_config!("ct-more"),
    // Hostile block structures and bit widths for the same tensors: empty,
    // one-element and uneven blocks, blocks past 2^32, 3 and 6 bits.
    (
        "hostile-blocks",
        Some(
            r#"{"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
            "a": {"weights": {"num_bits": 4, "block_structure": [0, 32]}},
            "b": {"weights": {"num_bits": 6, "block_structure": [1, 1]}},
            "c": {"weights": {"num_bits": 8, "block_structure": [3, 7]}},
            "d": {"weights": {"num_bits": 3, "block_structure": [4294967296, 1]}}}}}"#,
        ),
    ),
];

/// The config an input's first byte picks: its low four bits, and bit 6
/// for the entries past the sixteenth.
pub fn quant_config(pick: u8) -> (&'static str, Option<&'static str>) {
    let index = usize::from(pick & 15) | usize::from((pick >> 2) & 16);
    QUANT_CONFIGS[index % QUANT_CONFIGS.len()]
}

impl Harness {
    /// `quantized_record`: a quantized safetensors checkpoint (MXFP4
    /// `*_blocks`/`*_scales` with E8M0 scales, compressed-tensors packs,
    /// FP8 of every tiling incl. FBGEMM's, NVFP4, GPTQ/AWQ, bitsandbytes
    /// records), dequantized. The first byte picks the `config.json`
    /// written beside the model ([`quant_config`]) and the
    /// dtype dequantized to (next two bits); the rest is `model.safetensors`.
    /// The scheme is recognised from the header and the config, every
    /// auxiliary (scales, zeros, `g_idx`, records) read and checked, every
    /// weight dequantized by both conversion drivers, which must agree.
    pub fn quantized_record(&self, data: &[u8]) -> Outcomes {
        let Some((&pick, model)) = data.split_first() else {
            return Vec::new();
        };
        let dir = self.dir.path().join("quantized");
        std::fs::create_dir_all(&dir).expect("a scratch model folder");
        let config = dir.join("config.json");
        match quant_config(pick).1 {
            Some(text) => std::fs::write(&config, text).expect("writing config.json"),
            None => match std::fs::remove_file(&config) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("removing config.json: {e}"),
            },
        }
        let path = dir.join("model.safetensors");
        std::fs::write(&path, model).expect("writing model.safetensors");
        let to = [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F16][usize::from(pick >> 4) & 3];
        let options = SourceOptions::default().dequantize(Some(to));
        vec![(
            "dequantize",
            self.convert(&path, &options, PlanOptions::default()),
        )]
    }
}

/// Outputs larger than this are streamed into nothing, not kept.
const MAX_KEPT: u64 = 64 << 20;

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

/// Reads every tensor of `src` to its end.
async fn read_all(src: &mut dyn Source) -> Result<()> {
    use tokio::io::AsyncReadExt;
    let lens: Vec<u64> = src
        .tensors()
        .iter()
        .map(TensorMeta::byte_len)
        .collect::<Result<_>>()?;
    for (k, len) in lens.into_iter().enumerate() {
        let mut data = src.open(k).await?;
        let mut buf = vec![0u8; 64 << 10];
        let mut got = 0u64;
        loop {
            let n = data.reader.read(&mut buf).await.map_err(Error::io)?;
            if n == 0 {
                break;
            }
            got += n as u64;
            if got > len {
                break; // the sink refuses this too; we only want to not panic
            }
        }
    }
    Ok(())
}

/// `gguf_header`: the header parser, then the GGUF source opened on the same
/// bytes as a file and every tensor read to its end. Invariants: the parser
/// and the source accept the same files; every tensor listed has a length,
/// and its reader (quantized) or file span (plain) gives exactly that many
/// bytes, inside the file.
pub fn gguf_header(data: &[u8]) -> Outcomes {
    use safetensors_stream::internals::gguf::{header::read_header, GgufSource};
    use std::io::Read;
    let parsed = read_header(data, data.len() as u64);
    // Left at its end: the source reads from byte 0 wherever the handle is
    // (a spooled stream's is at its end too).
    let mut file = tempfile::tempfile().expect("a scratch file");
    file.write_all(data).expect("writing the scratch file");
    let opened = GgufSource::open(
        file,
        data.len() as u64,
        "fuzz.gguf",
        &SourceOptions::default(),
    );
    assert_eq!(
        parsed.is_ok(),
        opened.is_ok(),
        "the parser and the source disagree"
    );
    let mut out: Outcomes = vec![("header", parsed.map(drop))];
    let src = match opened {
        Ok(src) => src,
        Err(e) => {
            out.push(("open", Err(e)));
            return out;
        }
    };
    out.push(("open", Ok(())));
    for (k, t) in src.tensors().iter().enumerate() {
        let want = t.byte_len().expect("a listed tensor has a length");
        if let Some(open) = src.open_blocking(k) {
            let (mut r, _) = open().expect("a listed tensor opens");
            let mut buf = vec![0u8; 1 << 16];
            let mut n = 0u64;
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(got) => n += got as u64,
                    Err(e) => panic!("reading {}: {e}", t.name),
                }
            }
            assert_eq!(n, want, "{}", t.name);
        } else {
            let span = src.file_span(k).expect("a plain tensor has a span");
            assert_eq!(span.len, want, "{}", t.name);
            assert!(span.offset + span.len <= data.len() as u64);
        }
    }
    out
}

/// Tensor-name parts that make `convert_bytes` dequantize a file as well.
const QUANTIZED_MARKS: &[&[u8]] = &[
    b"_blocks",
    b"_scales",
    b"weight_packed",
    b"weight_scale",
    b"weight_zero_point",
    b"qweight",
    b".SCB",
    b"bitsandbytes__",
];

impl Harness {
    /// `onnx_model`: the bytes as an ONNX model in the scratch folder, beside
    /// a 4 KiB `w.bin` its external data may name; then every initializer
    /// read to its end. Invariants (asserted inside): each listed tensor's
    /// reader yields exactly its byte length, each span lies inside its file.
    pub fn onnx_model(&self, data: &[u8]) -> Outcomes {
        use safetensors_stream::source::onnx::OnnxSource;
        let path = self.dir.path().join("model.onnx");
        std::fs::write(&path, data).expect("writing the scratch model");
        let beside = self.dir.path().join("w.bin");
        if !beside.exists() {
            let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
            std::fs::write(&beside, bytes).expect("writing the scratch data file");
        }
        let file = File::open(&path).expect("opening the scratch model");
        let opened = OnnxSource::open(file, data.len() as u64, Some(&path), "fuzz.onnx");
        read_every_tensor(opened)
    }
}

/// `msgpack_file`: the bytes as a Flax MessagePack file, then every tensor
/// read to its end (the invariants of [`Harness::onnx_model`]).
pub fn msgpack_file(data: &[u8]) -> Outcomes {
    use safetensors_stream::source::msgpack::MsgpackSource;
    let mut file = tempfile::tempfile().expect("a scratch file");
    file.write_all(data).expect("writing the scratch file");
    read_every_tensor(MsgpackSource::open(file, data.len() as u64, "fuzz.msgpack"))
}

/// `hdf5_file`: the bytes as an HDF5 file, then every tensor read to its
/// end (the invariants of [`Harness::onnx_model`]).
pub fn hdf5_file(data: &[u8]) -> Outcomes {
    use safetensors_stream::source::hdf5::Hdf5Source;
    let mut file = tempfile::tempfile().expect("a scratch file");
    file.write_all(data).expect("writing the scratch file");
    read_every_tensor(Hdf5Source::open(file, data.len() as u64, "fuzz.h5"))
}

/// Opens a source, then reads each tensor as the copy engine would: its
/// blocking reader if it has one, else checks its span. A reader may refuse
/// what only reading shows (a corrupt deflate stream in an HDF5 chunk, a
/// chunk that decodes to the wrong length) with a typed error, which ends
/// the run as the step `read`; an untyped I/O error there is a bug.
fn read_every_tensor<S: Source>(opened: Result<S>) -> Outcomes {
    use std::io::Read;
    let src = match opened {
        Ok(src) => src,
        Err(e) => return vec![("open", Err(e))],
    };
    for (k, t) in src.tensors().iter().enumerate() {
        let want = t.byte_len().expect("a listed tensor has a length");
        if let Some(open) = src.open_blocking(k) {
            let (mut r, _) = open().expect("a listed tensor opens");
            let mut buf = vec![0u8; 1 << 16];
            let mut n = 0u64;
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(got) => n += got as u64,
                    Err(e) => {
                        let e = Error::io(e);
                        if let safetensors_stream::ErrorKind::Io(io) = e.kind() {
                            panic!("reading {}: an untyped error: {io}", t.name);
                        }
                        return vec![("open", Ok(())), ("read", Err(e))];
                    }
                }
            }
            assert_eq!(n, want, "{}", t.name);
        } else {
            let span = src
                .file_span(k)
                .expect("a tensor without a reader has a span");
            assert_eq!(span.len, want, "{}", t.name);
            let file_len = span.file.metadata().expect("the file's length").len();
            assert!(span.offset + span.len <= file_len, "{}", t.name);
        }
    }
    vec![("open", Ok(()))]
}

/// `bnb_record`: the bytes as a bitsandbytes `quant_state` record, of
/// either type. Invariants (asserted inside): an accepted record has a
/// block size the library reads and a shape whose element count fits.
pub fn bnb_record(data: &[u8]) -> Option<[u64; 2]> {
    safetensors_stream::internals::bnb_record(data)
}

/// `safetensors_header`: the bytes as a whole file, in every mode.
///
/// Invariants: strict acceptance implies reference acceptance of the same
/// header; an accepted header re-encodes (as given) to the same layout,
/// and that encoding parses back strictly to the same tensors and metadata.
pub fn safetensors_header(data: &[u8]) -> Outcomes {
    let strict = parse_file_bytes(data, Rules::STRICT);
    let reference = parse_file_bytes(data, Rules::REFERENCE);
    let source = parse_file_bytes(data, Rules::SOURCE);
    if let Ok(h) = &strict {
        match &reference {
            Ok(r) => assert_eq!(h, r, "strict and reference read different headers"),
            Err(e) => panic!("strict accepted, reference refused: {e}"),
        }
        match &source {
            Ok(r) => assert_eq!(h, r, "strict and source rules read different headers"),
            Err(e) => panic!("strict accepted, source rules refused: {e}"),
        }
    }
    if source.is_ok() {
        assert!(
            reference.is_ok(),
            "source rules accepted, reference refused"
        );
    }
    for h in [&strict, &reference, &source].into_iter().flatten() {
        check_reencodes(h);
    }
    vec![
        ("strict", strict.map(drop)),
        ("reference", reference.map(drop)),
        ("source", source.map(drop)),
    ]
}

fn check_reencodes(h: &Header) {
    let metas: Vec<TensorMeta> = h.tensors.iter().map(|t| t.meta.clone()).collect();
    let enc = match encode(metas, h.metadata.clone(), Order::AsGiven) {
        Ok(enc) => enc,
        Err(e) => panic!("an accepted header does not re-encode: {e}"),
    };
    assert_eq!(enc.header().tensors, h.tensors, "re-encoding moved tensors");
    assert_eq!(enc.header().metadata, h.metadata);
    // The data is at most the input's length: the header said so and was checked.
    let mut file = enc.bytes().to_vec();
    file.resize(enc.header().file_len() as usize, 0);
    let back = parse_file_bytes(&file, Rules::STRICT)
        .unwrap_or_else(|e| panic!("a re-encoded header does not parse strictly: {e}"));
    assert_eq!(back.tensors, h.tensors);
    assert_eq!(back.metadata, h.metadata);
}

/// `npy_header`: the prelude, the header text it announces, the text
/// parser under every version's decoding, and the reader over all of it.
/// The restricted unpickler on arbitrary bytes, with the limits and the
/// byte budget a checkpoint of this size gets (run under libFuzzer's
/// `-rss_limit_mb` with a large `-max_len`, so a memo DAG that expands
/// past its budget shows as an out-of-memory), then naming its value tree
/// as tensors. Checks: the pickle used no more bytes than it had, the
/// names found fit the budget, every tensor found lies inside its storage.
pub fn pickle(data: &[u8]) -> Outcomes {
    use safetensors_stream::internals::pickle::{unpickle, Limits};
    use safetensors_stream::internals::pytorch_model::{stride_of, tensors, view, Naming};
    use safetensors_stream::internals::Storages;
    let limits = Limits {
        marks: 1_000,
        ..Limits::for_input(data.len())
    };
    let mut out: Outcomes = Vec::new();
    let parsed = unpickle(data, limits);
    if let Ok((p, used)) = &parsed {
        assert!(*used <= data.len(), "used {used} of {} bytes", data.len());
        assert!((p.root as usize) < p.len(), "root outside the arena");
        for naming in [
            Naming::default(),
            Naming {
                root: Some("state_dict".into()),
                bare: Some("t".into()),
            },
        ] {
            // Each storage as long as the pickle declares it, as a file would be.
            let storages = Storages::declared(p);
            let tree = storages.and_then(|s| Ok((tensors(p, &naming, &s)?, s)));
            if let Ok((tree, storages)) = &tree {
                let names: usize = tree.tensors.iter().map(|t| t.name.len()).sum();
                assert!(
                    names <= limits.budget,
                    "{names} bytes of names past the budget"
                );
                for (k, (t, &place)) in tree.tensors.iter().zip(&tree.places).enumerate() {
                    let len = storages.get(place.storage).1.len;
                    let need = view(t, place, stride_of(&tree.strides, k))
                        .needed_bytes()
                        .expect("a found view has a size");
                    assert!(need <= len, "tensor {:?} reaches past its storage", t.name);
                }
            }
            out.push(("tensors", tree.map(drop)));
        }
    }
    out.push(("unpickle", parsed.map(drop)));
    out
}

pub fn npy_header(data: &[u8]) -> Outcomes {
    let mut out: Outcomes = Vec::new();
    let prelude = parse_prelude(data);
    if let Ok(p) = &prelude {
        let start = (p.text_start as usize).min(data.len());
        let end = (p.data_start() as usize).min(data.len());
        out.push(("text", parse_header_text(&data[start..end], p).map(drop)));
    }
    out.push(("prelude", prelude.map(drop)));
    // The text parser alone, on all the bytes, as latin-1 and as UTF-8.
    for major in [1u8, 3] {
        let p = Prelude {
            version: (major, 0),
            text_len: data.len() as u64,
            text_start: 0,
        };
        out.push(("bare_text", parse_header_text(data, &p).map(drop)));
    }
    let mut r = data;
    let read = read_header(&mut r);
    if let Ok((p, _)) = &read {
        let used = (data.len() - r.len()) as u64;
        assert_eq!(
            used,
            p.data_start(),
            "read_header left the reader off the data"
        );
    }
    out.push(("read_header", read.map(drop)));
    out
}

/// `detect`: format detection on the bytes and on the sniffed prefix
/// (what inputs really pass), and the preview for the unknown-format message.
pub fn detect_bytes(data: &[u8]) -> Format {
    let full = detect(data);
    let sniffed = detect(&data[..data.len().min(SNIFF_LEN)]);
    // Every magic is shorter than the sniff: only the safetensors guess,
    // which looks for `{` after whitespace, may see more in a longer input.
    if full != Format::SAFETENSORS && full != Format::Unknown {
        assert_eq!(full, sniffed, "detection depends on bytes past the sniff");
    }
    let preview = hex_preview(data);
    assert!(preview.len() <= 11 || data.is_empty());
    sniffed
}

/// A raw-dump layout read from the first bytes; the rest is the dump.
///
/// Byte 0: bits 0-1 the tensor count less one, bit 2 big-endian, bit 3
/// allow trailing bytes, bit 4 leave a single tensor unnamed (named from
/// the file). Then four bytes per tensor: dtype, rank and dimension
/// seeds, and offset.
pub fn raw_spec(data: &[u8]) -> Option<(RawSpec, &[u8])> {
    let (&ctl, mut rest) = data.split_first()?;
    let count = 1 + (ctl & 3) as usize;
    let mut tensors = Vec::with_capacity(count);
    for i in 0..count {
        let Some((b, tail)) = rest.split_first_chunk::<4>() else {
            break;
        };
        rest = tail;
        let [d, s0, s1, off] = *b;
        let dtype = Dtype::ALL[d as usize % Dtype::ALL.len()];
        let rank = (s0 & 3) as usize;
        let shape = (0..rank)
            .map(|j| match s0 >> 6 {
                // Mostly small dimensions; sometimes zero or enormous ones.
                3 if j == 0 => u64::MAX / (s1 as u64 + 1),
                2 if j == 0 => 0,
                _ => ((s1 >> (2 * j)) & 15) as u64 + ((s0 >> 2) & 15) as u64,
            })
            .collect();
        let offset = match off {
            255 => u64::MAX - 3,
            o => o as u64,
        };
        let name = if count == 1 && ctl & 16 != 0 {
            String::new()
        } else {
            format!("t{i}")
        };
        tensors.push(RawTensor {
            name,
            dtype,
            shape,
            offset,
        });
    }
    if tensors.is_empty() {
        return None;
    }
    let spec = RawSpec {
        tensors,
        big_endian: ctl & 4 != 0,
        allow_trailing: ctl & 8 != 0,
        manifest: None,
    };
    Some((spec, rest))
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).expect("gzip into a Vec");
    enc.finish().expect("gzip into a Vec")
}
