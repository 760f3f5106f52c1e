//! One conformance suite, run over every source kind: .npy, .npz (stored,
//! deflated, streamed by numpy), safetensors, each compressed wrapper, and
//! each of those arriving through a pipe (`convert <(cat x)`), plus .npy
//! streams handed to the library.
//!
//! For each subject the suite checks that the listing matches the expected
//! output, that every tensor opened in any order gives its exact bytes (of
//! exactly its length), that a random-access source gives the same bytes
//! when a tensor is opened twice (and a forward-only one refuses a second
//! open), that the whole conversion gives the expected file, and that
//! broken inputs fail with errors naming the input (and the tensor, when
//! the failure is in a tensor's bytes).

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use safetensors_stream::convert::{convert_sources, ConvertOptions, Output};
use safetensors_stream::header::{parse_file_bytes, Metadata, Rules};
use safetensors_stream::internals::zip::{data_start, read_directory};
use safetensors_stream::internals::{NpySource, Routes, Way};
use safetensors_stream::source::open_input;
use safetensors_stream::source::{Access, Listing, Source, SourceOptions, TensorReader};
use safetensors_stream::{Error, ErrorKind, HeaderError, ZipError};
use support::numpy::{block_on, build_zip, cases, fixtures, npy, tensors_of, Expected, ZipMember};
use tokio::io::AsyncReadExt;

/// How the input reaches the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// `open_input` on the file.
    File,
    /// `open_input` on `/proc/self/fd/N`, the read end of a pipe fed by `cat`.
    Pipe,
    /// `NpySource::from_stream` on an async reader (.npy only).
    Stream,
}

/// A child process, killed and reaped when dropped.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Opened {
    source: Box<dyn Source>,
    notices: Vec<String>,
    _child: Option<ChildGuard>,
}

/// The file name without `.npy` and compression suffixes: the tensor name
/// of a single-array input.
fn stem(path: &Path) -> String {
    let mut name = path.file_name().unwrap().to_string_lossy().into_owned();
    for suffix in [".gz", ".zst", ".xz", ".bz2", ".npy"] {
        if let Some(s) = name.strip_suffix(suffix) {
            name = s.to_string();
        }
    }
    name
}

fn is_npy_like(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name.contains(".npy")
}

/// Opens `path` by `transport`. Returns the name errors must use, and the source.
async fn open(path: &Path, transport: Transport) -> (String, Result<Opened, Error>) {
    let notices = Mutex::new(Vec::new());
    let notice = |m: &safetensors_stream::Note| notices.lock().unwrap().push(m.to_string());
    match transport {
        Transport::File => {
            let r = open_input(path, &SourceOptions::default(), &notice).await;
            let input = path.display().to_string();
            let r = r.map(|source| Opened {
                source,
                notices: notices.into_inner().unwrap(),
                _child: None,
            });
            (input, r)
        }
        Transport::Pipe => {
            let mut child = Command::new("cat")
                .arg(path)
                .stdout(Stdio::piped())
                .spawn()
                .expect("cat");
            let fd = child.stdout.as_ref().unwrap().as_raw_fd();
            let pipe = PathBuf::from(format!("/proc/self/fd/{fd}"));
            // A pipe has no file name to take a tensor name from.
            let options = SourceOptions::default().name(is_npy_like(path).then(|| stem(path)));
            let r = open_input(&pipe, &options, &notice).await;
            drop(child.stdout.take());
            let r = r.map(|source| Opened {
                source,
                notices: notices.into_inner().unwrap(),
                _child: Some(ChildGuard(child)),
            });
            (pipe.display().to_string(), r)
        }
        Transport::Stream => {
            let input = format!("stream:{}", path.display());
            let file = tokio::fs::File::open(path).await.unwrap();
            let reader: TensorReader<'static> = Box::pin(file);
            let r = async {
                let src = NpySource::from_stream(reader, &input, stem(path)).await?;
                let src = if src.needs_random_access() {
                    src.spool().await?
                } else {
                    src
                };
                Ok(Opened {
                    source: Box::new(src) as Box<dyn Source>,
                    notices: Vec::new(),
                    _child: None,
                })
            }
            .await;
            (input, r)
        }
    }
}

/// What a source must give.
struct Subject {
    label: String,
    path: PathBuf,
    transport: Transport,
    expected: BTreeMap<String, Expected>,
    metadata: Option<Metadata>,
    /// The expected output, byte for byte, when the reference wrote it.
    exact: Option<Vec<u8>>,
}

impl Subject {
    fn from_expected_file(label: &str, path: PathBuf, t: Transport, expected: &Path) -> Self {
        let exact = std::fs::read(expected).unwrap();
        let metadata = parse_file_bytes(&exact, Rules::STRICT).unwrap().metadata;
        Subject {
            label: format!("{label} [{t:?}]"),
            path,
            transport: t,
            expected: tensors_of(&exact),
            metadata,
            exact: Some(exact),
        }
    }
}

async fn read_tensor(src: &mut dyn Source, k: usize) -> Result<Vec<u8>, Error> {
    let mut data = src.open(k).await?;
    let mut buf = Vec::new();
    data.reader.read_to_end(&mut buf).await?;
    // The reader is finished: it stays finished.
    let mut more = [0u8; 16];
    assert_eq!(data.reader.read(&mut more).await?, 0, "bytes after the end");
    data.transform.apply(&mut buf);
    Ok(buf)
}

/// A fixed pseudo-random permutation of `0..n`.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = seed;
    for i in (1..n).rev() {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        v.swap(i, (x >> 33) as usize % (i + 1));
    }
    v
}

/// Every way of copying a conversion can be forced into: each copy route
/// turned off in turn (its tensors then take the next route down), kernel
/// copies by reads rather than from a mapping (the way taken before a
/// conversion's first long copy has timed both), and the fast path off
/// (every byte through the async sink).
fn route_matrix() -> Vec<(&'static str, ConvertOptions)> {
    let on = ConvertOptions::default().sync(false);
    let all = Routes::default();
    vec![
        (
            "without kernel copies",
            on.clone().routes(all.kernel(false)),
        ),
        (
            "without checked copies",
            on.clone().routes(all.checked(false)),
        ),
        ("without gathering", on.clone().routes(all.gather(false))),
        (
            "kernel copies by reads",
            on.clone().routes(all.way(Some(Way::Read))),
        ),
        (
            "without the buffered copy",
            on.clone().routes(all.buffered(false)),
        ),
        (
            "without blocking readers",
            on.clone().routes(all.blocking(false)),
        ),
        ("without the fast path", on.fast_path(false)),
    ]
}

/// Converts an opened source into a temp file under `options`; returns the
/// bytes or the error.
async fn convert_one(source: Box<dyn Source>, options: &ConvertOptions) -> Result<Vec<u8>, Error> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let mut sources = vec![source];
    convert_sources(&mut sources, &Output::File(out.clone()), options).await?;
    Ok(std::fs::read(out).unwrap())
}

/// The suite: every check, for one subject. Returns what went wrong.
async fn conformance(s: &Subject) -> Result<(), String> {
    let fail = |what: String| format!("{}: {what}", s.label);
    // Listing.
    let (input, opened) = open(&s.path, s.transport).await;
    let mut opened = opened.map_err(|e| fail(format!("open: {e}")))?;
    let src = opened.source.as_mut();
    if src.input_name() != input {
        return Err(fail(format!(
            "input named {:?}, not {input:?}",
            src.input_name()
        )));
    }
    let listing = Listing::of(src);
    let got: BTreeMap<String, (String, Vec<u64>)> = listing
        .tensors
        .iter()
        .map(|t| (t.name.clone(), (t.dtype.to_string(), t.shape.clone())))
        .collect();
    if got.len() != listing.tensors.len() {
        return Err(fail("a name is listed twice".into()));
    }
    let want: BTreeMap<String, (String, Vec<u64>)> = s
        .expected
        .iter()
        .map(|(n, e)| (n.clone(), (e.dtype.to_string(), e.shape.clone())))
        .collect();
    if got != want {
        return Err(fail(format!("listing {got:?}, expected {want:?}")));
    }
    if listing.metadata != s.metadata {
        return Err(fail(format!("metadata {:?}", listing.metadata)));
    }
    let spooled = opened.notices.iter().any(|n| n.contains("spool"));
    let needs_spool = s.transport == Transport::Pipe && !is_npy_like(&s.path);
    if needs_spool && !spooled {
        return Err(fail("a pipe needing random access was not spooled".into()));
    }
    // Bytes, in any order.
    let n = listing.tensors.len();
    let names: Vec<String> = listing.tensors.iter().map(|t| t.name.clone()).collect();
    let check = |k: usize, bytes: &[u8]| -> Result<(), String> {
        let e = &s.expected[&names[k]];
        if bytes.len() as u64 != listing.tensors[k].byte_len().unwrap() {
            return Err(fail(format!(
                "tensor {:?}: {} bytes, not its length",
                names[k],
                bytes.len()
            )));
        }
        if bytes != e.data {
            return Err(fail(format!("tensor {:?}: wrong bytes", names[k])));
        }
        Ok(())
    };
    match src.access() {
        Access::Random => {
            // Forward order is the conversion's, below.
            for order in [(0..n).rev().collect::<Vec<_>>(), shuffled(n, 7)] {
                for k in order {
                    let b = read_tensor(src, k)
                        .await
                        .map_err(|e| fail(format!("read {:?}: {e}", names[k])))?;
                    check(k, &b)?;
                }
            }
            // Twice in a row, same bytes.
            // (a sample of a large archive)
            for k in shuffled(n, 11).into_iter().take(64) {
                let a = read_tensor(src, k).await.map_err(|e| fail(e.to_string()))?;
                let b = read_tensor(src, k).await.map_err(|e| fail(e.to_string()))?;
                if a != b {
                    return Err(fail(format!("tensor {:?} differs when reopened", names[k])));
                }
            }
        }
        Access::Sequential => {
            for (k, name) in names.iter().enumerate() {
                let b = read_tensor(src, k)
                    .await
                    .map_err(|e| fail(format!("read {name:?}: {e}")))?;
                check(k, &b)?;
            }
            if n > 0 && src.open(0).await.is_ok() {
                return Err(fail("a forward-only source opened a tensor twice".into()));
            }
        }
    }
    drop(opened);
    // The whole conversion, from a fresh source.
    let (_, opened) = open(&s.path, s.transport).await;
    let opened = opened.map_err(|e| fail(format!("reopen: {e}")))?;
    let all = ConvertOptions::default().sync(false);
    let out = convert_one(opened.source, &all)
        .await
        .map_err(|e| fail(format!("safetensors-convert: {e}")))?;
    // One copy core: every route forced off in turn writes the same bytes.
    for (forced, options) in route_matrix() {
        let (_, opened) = open(&s.path, s.transport).await;
        let opened = opened.map_err(|e| fail(format!("reopen: {e}")))?;
        let other = convert_one(opened.source, &options)
            .await
            .map_err(|e| fail(format!("convert {forced}: {e}")))?;
        if other != out {
            return Err(fail(format!("{forced}, the bytes differ")));
        }
    }
    match &s.exact {
        Some(exact) if &out != exact => Err(fail("output differs from the expected file".into())),
        _ if tensors_of(&out) != s.expected => Err(fail("output tensors differ".into())),
        _ => Ok(()),
    }
}

fn run_all(subjects: &[Subject]) {
    block_on(async {
        let mut failures = Vec::new();
        for s in subjects {
            let t = std::time::Instant::now();
            if let Err(e) = conformance(s).await {
                failures.push(e);
            }
            if std::env::var_os("CONFORMANCE_TIMES").is_some() {
                eprintln!("{:>8.1?} {}", t.elapsed(), s.label);
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} subjects failed:\n{}",
            failures.len(),
            subjects.len(),
            failures.join("\n")
        );
    });
}

/// Every fixture that converts, by one transport.
fn fixture_subjects(t: Transport, only_npy: bool) -> Vec<Subject> {
    cases()
        .into_iter()
        .filter(|c| c.error.is_none())
        .filter(|c| !only_npy || c.kind == "npy" || c.input.ends_with(".npy.gz"))
        // Non-.npy members need `skip_non_npy`, tested in numpy::sources.
        .filter(|c| !c.input.ends_with("extra_member.npz"))
        .map(|c| {
            let expected = c.expected_path().unwrap_or_else(|| c.input_path()); // a canonical safetensors input
            Subject::from_expected_file(&c.input, c.input_path(), t, &expected)
        })
        .collect()
}

#[test]
fn fixtures_from_files() {
    let subjects = fixture_subjects(Transport::File, false);
    assert!(subjects.len() > 50);
    run_all(&subjects);
}

#[test]
fn fixtures_from_pipes() {
    run_all(&fixture_subjects(Transport::Pipe, false));
}

#[test]
fn npy_fixtures_from_library_streams() {
    let subjects: Vec<Subject> = fixture_subjects(Transport::Stream, true)
        .into_iter()
        .filter(|s| !s.path.to_string_lossy().ends_with(".gz"))
        .collect();
    run_all(&subjects);
}

/// The checkpoints torch wrote (views that split, stride, expand and tie
/// storages; big-endian; the legacy format; gzipped; sharded): every route
/// forced off in turn writes the bytes the default writes, which
/// `tests/it/pytorch.rs` checks against torch's own values.
#[test]
fn pytorch_checkpoints_on_every_route() {
    let ok = fixtures().join("pytorch/ok");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&ok)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            [".pt", ".pt.gz"]
                .iter()
                .any(|x| p.to_string_lossy().ends_with(x))
        })
        .collect();
    inputs.sort();
    inputs.push(ok.join("sharded/pytorch_model.bin.index.json"));
    assert!(inputs.len() >= 10, "{inputs:?}");
    block_on(async {
        let convert = |path: PathBuf, options: ConvertOptions| async move {
            let (_, opened) = open(&path, Transport::File).await;
            let source = opened.unwrap_or_else(|e| panic!("{path:?}: {e}")).source;
            convert_one(source, &options)
                .await
                .unwrap_or_else(|e| panic!("{path:?}: {e}"))
        };
        for path in inputs {
            let out = convert(path.clone(), ConvertOptions::default().sync(false)).await;
            for (forced, options) in route_matrix() {
                let other = convert(path.clone(), options).await;
                assert!(other == out, "{path:?} {forced}: the bytes differ");
            }
        }
    });
}

// ---- generated subjects: larger, and every zip variant ------------------------

/// Little-endian bytes of `n` values of `width` bytes: pseudo-random, with
/// a period of 4099 elements (a prime), so deflate finds matches in its window.
fn pattern(n: usize, width: usize, seed: u64) -> Vec<u8> {
    let period: Vec<u8> = (0..4099u64)
        .flat_map(|i| {
            let mut z = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z ^= z >> 31;
            z.to_le_bytes()[..width].to_vec()
        })
        .collect();
    period.iter().copied().cycle().take(n * width).collect()
}

/// C-order little-endian `data` (shape `shape`, `width`-byte elements)
/// rewritten as Fortran order and/or big-endian, as it lies in a file.
fn as_stored(data: &[u8], shape: &[u64], width: usize, fortran: bool, swap: usize) -> Vec<u8> {
    let n = data.len() / width;
    let mut out = vec![0u8; data.len()];
    for ci in 0..n {
        let fi = if fortran {
            let mut rem = ci as u64;
            let mut idx = vec![0u64; shape.len()];
            for k in (0..shape.len()).rev() {
                idx[k] = rem % shape[k];
                rem /= shape[k];
            }
            let mut fi = 0u64;
            for k in (0..shape.len()).rev() {
                fi = fi * shape[k] + idx[k];
            }
            fi as usize
        } else {
            ci
        };
        let dst = &mut out[fi * width..(fi + 1) * width];
        dst.copy_from_slice(&data[ci * width..(ci + 1) * width]);
        if swap > 1 {
            dst.chunks_mut(swap).for_each(|w| w.reverse());
        }
    }
    out
}

#[derive(Clone)]
struct Array {
    name: &'static str,
    descr: &'static str,
    dtype: safetensors_stream::Dtype,
    shape: Vec<u64>,
    fortran: bool,
}

impl Array {
    fn width(&self) -> usize {
        self.dtype.byte_width().unwrap() as usize
    }

    fn swap(&self) -> usize {
        match (self.descr.starts_with('>'), self.descr) {
            (true, ">c8") => 4,
            (true, _) => self.width(),
            _ => 1,
        }
    }

    /// (the .npy bytes, the expected tensor).
    fn build(&self, seed: u64) -> (Vec<u8>, Expected) {
        let n: u64 = self.shape.iter().product();
        let data = pattern(n as usize, self.width(), seed);
        let stored = as_stored(&data, &self.shape, self.width(), self.fortran, self.swap());
        let file = npy(self.descr, self.fortran, &self.shape, &stored);
        let e = Expected {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data,
        };
        (file, e)
    }
}

fn arrays() -> Vec<Array> {
    use safetensors_stream::Dtype::*;
    let a = |name, descr, dtype, shape: &[u64], fortran| Array {
        name,
        descr,
        dtype,
        shape: shape.to_vec(),
        fortran,
    };
    vec![
        a("w.c", "<f4", F32, &[64, 1024], false),
        a("w.f_be", ">i2", I16, &[300, 70], true),
        a("bytes", "|u1", U8, &[1000], false),
        a("z.c8", ">c8", C64, &[17, 3], true),
        a("s", "<f8", F64, &[], false),
        a("e", "<i8", I64, &[3, 0, 2], false),
        // Over the Fortran reader's 8 MiB block: read in several blocks.
        a("big.fortran", "<f4", F32, &[200_000, 3, 4], true),
    ]
}

/// Writes the generated inputs into `dir`: .npy files, an npz of every
/// member variant, and wrapped copies. Returns the subjects.
fn generated(dir: &Path) -> Vec<Subject> {
    let arrays = arrays();
    let mut all = BTreeMap::new();
    let mut members = Vec::new();
    let mut subjects = Vec::new();
    for (i, a) in arrays.iter().enumerate() {
        let (file, e) = a.build(i as u64 + 1);
        let path = dir.join(format!("{}.npy", a.name));
        std::fs::write(&path, &file).unwrap();
        for t in [Transport::File, Transport::Pipe, Transport::Stream] {
            subjects.push(Subject {
                label: format!("generated {} [{t:?}]", a.name),
                path: path.clone(),
                transport: t,
                expected: BTreeMap::from([(a.name.to_string(), e.clone())]),
                metadata: None,
                exact: None,
            });
        }
        let mut m = match i % 2 {
            0 => ZipMember::stored(&format!("{}.npy", a.name), file),
            _ => ZipMember::deflated(&format!("{}.npy", a.name), file),
        };
        m.descriptor = i % 3 == 1;
        m.zip64_local = i % 4 != 3;
        members.push(m);
        all.insert(a.name.to_string(), e);
    }
    let (zip, _) = build_zip(&members);
    let npz = dir.join("gen.npz");
    std::fs::write(&npz, &zip).unwrap();
    for t in [Transport::File, Transport::Pipe] {
        subjects.push(Subject {
            label: format!("generated npz [{t:?}]"),
            path: npz.clone(),
            transport: t,
            expected: all.clone(),
            metadata: None,
            exact: None,
        });
    }
    let gz = dir.join("gen.npz.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&zip).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    subjects.push(Subject {
        label: "generated npz.gz [File]".into(),
        path: gz,
        transport: Transport::File,
        expected: all,
        metadata: None,
        exact: None,
    });
    subjects
}

#[test]
fn generated_inputs() {
    let dir = tempfile::tempdir().unwrap();
    run_all(&generated(dir.path()));
}

// ---- broken inputs: errors name the input and the tensor ----------------------

/// When the failure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Opening the input fails; the error names the input.
    Open,
    /// Opening works; writing the tensor fails, naming the input and the tensor.
    Write,
    /// Either: a codec whose blocks are larger than the input gives no byte
    /// (not even the header) before its first block is whole.
    Either,
}

struct Broken {
    label: String,
    path: PathBuf,
    transport: Transport,
    stage: Stage,
    kind: fn(&ErrorKind) -> bool,
    /// Done to the input file after it is opened.
    after_open: Option<fn(&Path)>,
}

/// Runs a broken input with every route, then with each forced off in
/// turn: all must fail the same way (kind, input, tensor, offset).
async fn broken(b: &Broken) -> Result<(), String> {
    let original = std::fs::read(&b.path).unwrap();
    let fast = broken_once(b, &ConvertOptions::default().sync(false)).await?;
    // Each names its own input (checked in `broken_once`): a pipe's
    // /proc/self/fd/N differs between the runs.
    let facts = |e: &Error| {
        (
            std::mem::discriminant(e.kind()),
            e.tensor().map(str::to_string),
            e.offset(),
        )
    };
    for (forced, options) in route_matrix() {
        std::fs::write(&b.path, &original).unwrap();
        let other = broken_once(b, &options).await?;
        if facts(&fast) != facts(&other) {
            let fail = format!("{} [{:?}]", b.label, b.transport);
            return Err(format!(
                "{fail}: every route says {fast:?}, {forced} {other:?}"
            ));
        }
    }
    Ok(())
}

async fn broken_once(b: &Broken, options: &ConvertOptions) -> Result<Error, String> {
    let fail = |what: String| format!("{} [{:?}]: {what}", b.label, b.transport);
    let (input, opened) = open(&b.path, b.transport).await;
    let e = match (opened, b.stage) {
        (Err(e), Stage::Open | Stage::Either) => e,
        (Err(e), Stage::Write) => return Err(fail(format!("open failed: {e}"))),
        (Ok(_), Stage::Open) => return Err(fail("opened".into())),
        (Ok(o), Stage::Write | Stage::Either) => {
            if let Some(f) = b.after_open {
                f(&b.path);
            }
            let tensors: Vec<String> = o.source.tensors().iter().map(|t| t.name.clone()).collect();
            let e = match convert_one(o.source, options).await {
                Ok(_) => return Err(fail("converted".into())),
                Err(e) => e,
            };
            match e.tensor() {
                Some(t) if tensors.iter().any(|n| n == t) => {}
                other => return Err(fail(format!("names tensor {other:?}: {e}"))),
            }
            e
        }
    };
    if !(b.kind)(e.kind()) {
        return Err(fail(format!("unexpected kind {:?}: {e}", e.kind())));
    }
    if e.input() != Some(input.as_str()) {
        return Err(fail(format!(
            "names input {:?}, not {input:?}: {e}",
            e.input()
        )));
    }
    if !e.to_string().starts_with(&format!("{input}: ")) {
        return Err(fail(format!("message does not start with the input: {e}")));
    }
    Ok(e)
}

fn truncate_by_half(path: &Path) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len / 2 + 7).unwrap();
}

fn cut_tail(path: &Path) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 3).unwrap();
}

/// Flips one byte in the last quarter of the biggest member's data.
fn corrupt_biggest_member(zip: &mut [u8]) {
    let mut tmp = tempfile::tempfile().unwrap();
    tmp.write_all(zip).unwrap();
    let (entries, dir) = read_directory(&tmp, zip.len() as u64).unwrap();
    let e = entries.iter().max_by_key(|e| e.compressed).unwrap();
    let start = data_start(&tmp, e, dir).unwrap();
    let at = start + e.compressed * 3 / 4;
    zip[at as usize] ^= 0x40;
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

async fn encode_with(codec: &str, data: &[u8]) -> Vec<u8> {
    use async_compression::tokio::write::{BzEncoder, XzEncoder, ZstdEncoder};
    use tokio::io::AsyncWriteExt;
    async fn run<W: tokio::io::AsyncWrite + Unpin>(mut w: W, data: &[u8]) -> W {
        w.write_all(data).await.unwrap();
        w.shutdown().await.unwrap();
        w
    }
    match codec {
        "gz" => gzip(data),
        "zst" => run(ZstdEncoder::new(Vec::new()), data).await.into_inner(),
        "xz" => run(XzEncoder::new(Vec::new()), data).await.into_inner(),
        "bz2" => run(BzEncoder::new(Vec::new()), data).await.into_inner(),
        _ => unreachable!(),
    }
}

#[test]
fn broken_inputs_name_input_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let any: fn(&ErrorKind) -> bool = |_| true;
    let zip_kind: fn(&ErrorKind) -> bool = |k| matches!(k, ErrorKind::Zip(_));
    let short: fn(&ErrorKind) -> bool = |k| {
        matches!(
            k,
            ErrorKind::TensorTooShort { .. } | ErrorKind::Io(_) | ErrorKind::Zip(_)
        )
    };
    let mut cases: Vec<Broken> = Vec::new();
    let mut add = |label: &str,
                   path: PathBuf,
                   ts: &[Transport],
                   stage: Stage,
                   kind: fn(&ErrorKind) -> bool,
                   after: Option<fn(&Path)>| {
        for &t in ts {
            // A fresh copy per transport: `after_open` changes it.
            let copy = d.join(format!(
                "{}-{t:?}-{}",
                cases.len(),
                path.file_name().unwrap().to_string_lossy()
            ));
            std::fs::copy(&path, &copy).unwrap();
            cases.push(Broken {
                label: label.to_string(),
                path: copy,
                transport: t,
                stage,
                kind,
                after_open: after,
            });
        }
    };
    // A random-access file that shrinks after it was opened.
    let big = Array {
        name: "w",
        descr: "<f4",
        dtype: safetensors_stream::Dtype::F32,
        shape: vec![64, 1024],
        fortran: false,
    };
    // Incompressible data: a cut in the compressed stream lands in the data.
    let noise: Vec<u8> = (0..256 * 1024u64)
        .map(|i| {
            let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            (z ^ (z >> 31)) as u8
        })
        .collect();
    let w_npy = npy("<f4", false, &[64, 1024], &noise);
    let w_path = d.join("w.npy");
    std::fs::write(&w_path, &w_npy).unwrap();
    add(
        "npy shrinks after open",
        w_path.clone(),
        &[Transport::File],
        Stage::Write,
        short,
        Some(truncate_by_half),
    );
    let wf = Array {
        fortran: true,
        shape: vec![256, 256],
        ..big.clone()
    };
    let (wf_npy, _) = wf.build(4);
    let wf_path = d.join("wf.npy");
    std::fs::write(&wf_path, &wf_npy).unwrap();
    add(
        "fortran npy shrinks after open",
        wf_path,
        &[Transport::File],
        Stage::Write,
        any,
        Some(truncate_by_half),
    );
    let st = fixtures().join("example/model-input.safetensors");
    add(
        "safetensors shrinks after open",
        st.clone(),
        &[Transport::File],
        Stage::Write,
        short,
        Some(cut_tail),
    );
    // Truncated before opening: refused at once, naming the input.
    let data_len: fn(&ErrorKind) -> bool = |k| matches!(k, ErrorKind::DataLength { .. });
    let cut = d.join("cut.npy");
    std::fs::write(&cut, &w_npy[..w_npy.len() - 5]).unwrap();
    add(
        "npy file short",
        cut.clone(),
        &[Transport::File],
        Stage::Open,
        data_len,
        None,
    );
    // From a stream the length is unknown until the end: the sink notices.
    let too_short: fn(&ErrorKind) -> bool = |k| matches!(k, ErrorKind::TensorTooShort { .. });
    add(
        "npy stream short",
        cut,
        &[Transport::Pipe, Transport::Stream],
        Stage::Write,
        too_short,
        None,
    );
    let long = d.join("long.npy");
    let mut l = w_npy.clone();
    l.extend_from_slice(b"xyz");
    std::fs::write(&long, &l).unwrap();
    let too_long: fn(&ErrorKind) -> bool = |k| matches!(k, ErrorKind::TensorTooLong { .. });
    add(
        "npy stream long",
        long.clone(),
        &[Transport::Pipe, Transport::Stream],
        Stage::Write,
        too_long,
        None,
    );
    add(
        "npy file long",
        long,
        &[Transport::File],
        Stage::Open,
        data_len,
        None,
    );
    // A member with a bad CRC: found while streaming it, whatever the transport.
    let mut members: Vec<ZipMember> = Vec::new();
    let (a, _) = big.build(5);
    let (f, _) = wf.build(6);
    members.push(ZipMember::stored("a.npy", a.clone()));
    members.push(ZipMember::deflated(
        "small.npy",
        npy("<i4", false, &[4], &[1; 16]),
    ));
    let (mut zip, _) = build_zip(&members);
    corrupt_biggest_member(&mut zip);
    let bad_stored = d.join("bad_stored.npz");
    std::fs::write(&bad_stored, &zip).unwrap();
    add(
        "npz stored member CRC",
        bad_stored,
        &[Transport::File, Transport::Pipe],
        Stage::Write,
        zip_kind,
        None,
    );
    let mut m2 = vec![
        ZipMember::deflated("f.npy", f),
        ZipMember::stored("x.npy", npy("|u1", false, &[3], b"abc")),
    ];
    m2[0].descriptor = true;
    let (mut zip2, _) = build_zip(&m2);
    corrupt_biggest_member(&mut zip2);
    let bad_deflated = d.join("bad_deflated.npz");
    std::fs::write(&bad_deflated, &zip2).unwrap();
    add(
        "npz deflated fortran member corrupt",
        bad_deflated,
        &[Transport::File, Transport::Pipe],
        Stage::Write,
        zip_kind,
        None,
    );
    // A PyTorch storage split by views (its parts, a step slice), a byte
    // flipped inside it: no view is the whole member, so each route reads
    // the views only after checking the storage's CRC once, and refuses.
    let mut pt = std::fs::read(fixtures().join("pytorch/ok/views.pt")).unwrap();
    let arange: Vec<u8> = (0..48).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let at = pt.windows(arange.len()).position(|w| w == arange).unwrap();
    pt[at + 30 * 4 + 1] ^= 0x40;
    let bad_pt = d.join("split.pt");
    std::fs::write(&bad_pt, &pt).unwrap();
    let crc: fn(&ErrorKind) -> bool = |k| matches!(k, ErrorKind::Zip(ZipError::CrcMismatch { .. }));
    add(
        "pt storage split by views, corrupt",
        bad_pt,
        &[Transport::File],
        Stage::Write,
        crc,
        None,
    );
    let bad_gz = d.join("bad.npz.gz");
    std::fs::write(&bad_gz, gzip(&zip)).unwrap();
    add(
        "npz.gz member CRC",
        bad_gz,
        &[Transport::File],
        Stage::Write,
        zip_kind,
        None,
    );
    // Truncated archives and files arriving by pipe: refused when opened.
    let half = d.join("half.npz");
    std::fs::write(&half, &zip[..zip.len() / 2]).unwrap();
    add(
        "npz truncated",
        half,
        &[Transport::File, Transport::Pipe],
        Stage::Open,
        zip_kind,
        None,
    );
    let st_bytes = std::fs::read(&st).unwrap();
    let st_half = d.join("half.safetensors");
    std::fs::write(&st_half, &st_bytes[..st_bytes.len() - 9]).unwrap();
    let file_len: fn(&ErrorKind) -> bool =
        |k| matches!(k, ErrorKind::Header(HeaderError::FileLength { .. }));
    add(
        "safetensors truncated",
        st_half,
        &[Transport::File, Transport::Pipe],
        Stage::Open,
        file_len,
        None,
    );
    // Compressed wrappers cut short: an .npy fails in its data, naming the
    // tensor; an archive fails when spooled.
    let decompress: fn(&ErrorKind) -> bool = |k| matches!(k, ErrorKind::Decompress { .. });
    let wrapped: Vec<(String, Vec<u8>, Vec<u8>)> = block_on(async {
        let mut v = Vec::new();
        for codec in ["gz", "zst", "xz", "bz2"] {
            v.push((
                codec.to_string(),
                encode_with(codec, &w_npy).await,
                encode_with(codec, &zip).await,
            ));
        }
        v
    });
    for (codec, npy_c, zip_c) in wrapped {
        let p = d.join(format!("cut.npy.{codec}"));
        std::fs::write(&p, &npy_c[..npy_c.len() * 2 / 3]).unwrap();
        add(
            &format!("npy.{codec} cut short"),
            p,
            &[Transport::File, Transport::Pipe],
            if codec == "bz2" {
                Stage::Either
            } else {
                Stage::Write
            },
            decompress,
            None,
        );
        let p = d.join(format!("cut.npz.{codec}"));
        std::fs::write(&p, &zip_c[..zip_c.len() * 2 / 3]).unwrap();
        add(
            &format!("npz.{codec} cut short"),
            p,
            &[Transport::File],
            Stage::Open,
            decompress,
            None,
        );
        let p = d.join(format!("junk.npy.{codec}"));
        let mut j = npy_c.clone();
        j.extend_from_slice(b"not another member");
        std::fs::write(&p, &j).unwrap();
        add(
            &format!("npy.{codec} with trailing junk"),
            p,
            &[Transport::File],
            Stage::Write,
            decompress,
            None,
        );
    }
    let failures: Vec<String> = block_on(async {
        let mut f = Vec::new();
        for c in &cases {
            if let Err(e) = broken(c).await {
                f.push(e);
            }
        }
        f
    });
    assert!(
        failures.is_empty(),
        "{} of {} broken inputs misreported:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---- standard input, through the binary -----------------------------------------

/// `cat INPUT | convert - -o OUT [ARGS]`: the output, or the exit code and stderr.
fn convert_stdin(input: &Path, args: &[&str], out: &Path) -> std::process::Output {
    let mut cat = Command::new("cat")
        .arg(input)
        .stdout(Stdio::piped())
        .spawn()
        .expect("cat");
    let pipe = cat.stdout.take().unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .arg("-")
        .arg("-o")
        .arg(out)
        .args(args)
        .stdin(Stdio::from(pipe))
        .output()
        .expect("convert");
    let _ = cat.wait();
    r
}

#[test]
fn standard_input_through_the_binary() {
    let f = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let subjects: [(&str, &[&str], &str); 6] = [
        ("npz/streamed.npz", &[], "npz/expected/streamed.safetensors"),
        (
            "npz/mixed_compressed.npz",
            &[],
            "npz/expected/mixed_compressed.safetensors",
        ),
        (
            "compressed/arrs.npz.xz",
            &[],
            "compressed/expected/arrs.safetensors",
        ),
        (
            "npy/fortran_3d_be.npy",
            &["--name", "fortran_3d_be"],
            "npy/expected/fortran_3d_be.safetensors",
        ),
        (
            "compressed/multi.npy.zst",
            &["--name", "multi"],
            "compressed/expected/multi.safetensors",
        ),
        (
            "example/model-input.safetensors",
            &[],
            "example/model-input.safetensors",
        ),
    ];
    for (i, (input, args, expected)) in subjects.iter().enumerate() {
        let out = dir.path().join(format!("{i}.safetensors"));
        let r = convert_stdin(&f.join(input), args, &out);
        assert!(
            r.status.success(),
            "{input}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(f.join(expected)).unwrap(),
            "{input}"
        );
    }
    // An .npy from standard input has no file name to take a tensor name from.
    let out = dir.path().join("unnamed.safetensors");
    let r = convert_stdin(&f.join("npy/dtype_f4.npy"), &[], &out);
    assert_eq!(
        r.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(String::from_utf8_lossy(&r.stderr).contains("--name"));
    assert!(!out.exists());
    // A refused input: exit 1, the message names standard input, nothing written.
    let r = convert_stdin(&f.join("npz/bad/object_member.npz"), &[], &out);
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("-: ") && err.contains("|O"), "{err}");
    assert!(!out.exists());
}
