//! Bounded memory for large NumPy inputs, measured with a counting global
//! allocator: a 256 MiB deflated npz member and a 256 MiB Fortran-order
//! .npy (and Fortran-order arrays whose rows are over the bound) convert
//! with a heap peak far below their size. And zip64: an npz
//! whose member is over 4 GiB (a sparse file), listed, planned and read.
//!
//! The inputs are generated in a temp dir; the tests of this binary run one
//! at a time (the allocator's counters are global).

use crate::support;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use safetensors_stream::internals::write_shard;
use safetensors_stream::internals::zip::{data_start, read_directory, Method};
use safetensors_stream::plan::{plan, PlanOptions};
use safetensors_stream::sink::SinkOptions;
use safetensors_stream::source::open_input;
use safetensors_stream::source::{Listing, Source, SourceOptions};
use safetensors_stream::Dtype;
use support::numpy::{eocd, le16, le32, le64, npy_header, zip64_eocd};
use tokio::io::AsyncReadExt;

use crate::alloc::peak_during;

const MIB: u64 = 1 << 20;
const LIMIT: usize = 32 << 20;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Opens `path` and streams the whole conversion into `tokio::io::sink()`.
/// Returns the bytes of output.
async fn convert_to_sink(path: &Path) -> u64 {
    let quiet = |_: &safetensors_stream::Note| {};
    let source = open_input(path, &SourceOptions::default(), &quiet)
        .await
        .unwrap();
    let listing = Listing::of(source.as_ref());
    let p = plan(&[listing], &PlanOptions::default()).unwrap();
    let mut sources: Vec<Box<dyn Source>> = vec![source];
    let shard = &p.shards[0];
    write_shard(
        tokio::io::sink(),
        shard,
        &mut sources,
        SinkOptions::default(),
        "sink",
    )
    .await
    .unwrap();
    shard.file_len()
}

/// Converts `path` into a sink under the allocator's eye; prints and checks the peak.
fn measure(label: &str, path: &Path, data_len: u64) {
    let rt = runtime();
    let start = Instant::now();
    let (written, peak) = peak_during(|| rt.block_on(convert_to_sink(path)));
    println!(
        "{label}: {} MiB in {:.2?}, heap peak {:.2} MiB above baseline",
        written / MIB,
        start.elapsed(),
        peak as f64 / MIB as f64
    );
    assert!(written > data_len, "{written} bytes written");
    assert!(
        peak < LIMIT,
        "{label}: heap peak {peak} bytes, over the {LIMIT}-byte bound"
    );
}

// ---- a 256 MiB deflated member -------------------------------------------------

/// 1 MiB of data with a 4 KiB period: each MiB is the same, so its
/// deflate stream, once the window holds a previous MiB, can be repeated.
fn period_block() -> Vec<u8> {
    let mut x = 0x9e37_79b9u32;
    let period: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    period.repeat(256)
}

/// Writes an npz holding one deflated member `name`: `header` then `mib`
/// copies of `block`, built without compressing more than two MiB.
fn write_deflated_npz(path: &Path, name: &str, header: &[u8], block: &[u8], mib: u64) {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(header).unwrap();
    e.write_all(block).unwrap();
    e.flush().unwrap();
    let first = e.get_ref().len();
    e.write_all(block).unwrap();
    e.flush().unwrap();
    let second = e.get_ref().len();
    let stream = e.finish().unwrap();
    let (head, chunk, tail) = (&stream[..first], &stream[first..second], &stream[second..]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(header);
    for _ in 0..mib {
        crc.update(block);
    }
    let crc = crc.finalize();
    let compressed = (head.len() + chunk.len() * (mib as usize - 1) + tail.len()) as u64;
    let uncompressed = header.len() as u64 + mib * block.len() as u64;
    let mut w = BufWriter::new(File::create(path).unwrap());
    let mut local = Vec::new();
    local_header(&mut local, name, 8, crc, compressed, uncompressed, None);
    w.write_all(&local).unwrap();
    w.write_all(head).unwrap();
    for _ in 1..mib {
        w.write_all(chunk).unwrap();
    }
    w.write_all(tail).unwrap();
    let dir_offset = local.len() as u64 + compressed;
    let mut central = Vec::new();
    central_entry(&mut central, name, 8, crc, compressed, uncompressed, 0);
    w.write_all(&central).unwrap();
    let mut end = Vec::new();
    eocd(&mut end, 1, central.len() as u64, dir_offset);
    w.write_all(&end).unwrap();
    w.flush().unwrap();
}

#[test]
fn deflated_member_of_256_mib() {
    let _serial = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.npz");
    let mib = 256;
    let header = npy_header("<f4", false, &[mib * MIB / 4 / 1024, 1024]);
    write_deflated_npz(&path, "w.npy", &header, &period_block(), mib);
    measure("deflated 256 MiB member", &path, mib * MIB);
}

// ---- a 256 MiB Fortran-order array -----------------------------------------------

fn write_fortran_npy(path: &Path, shape: &[u64]) -> u64 {
    let mut w = BufWriter::new(File::create(path).unwrap());
    w.write_all(&npy_header("<f4", true, shape)).unwrap();
    let n: u64 = shape.iter().product();
    let mut chunk = Vec::with_capacity(MIB as usize);
    let mut i = 0u64;
    while i < n {
        chunk.clear();
        let k = (n - i).min(MIB / 4);
        for j in i..i + k {
            chunk.extend_from_slice(&(j as f32).to_le_bytes());
        }
        w.write_all(&chunk).unwrap();
        i += k;
    }
    w.flush().unwrap();
    n * 4
}

/// A Fortran-order `.npy` of `shape` f4, converted under the counter.
fn fortran_npy(what: &str, shape: &[u64]) {
    let _serial = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fortran.npy");
    let len = write_fortran_npy(&path, shape);
    measure(what, &path, len);
}

/// A deflated `.npz` member of `mib` MiB of Fortran-order f4 in `rows`
/// first-axis rows: inflated to a temp file, then reordered.
fn deflated_fortran_member(what: &str, mib: u64, rows: u64) {
    let _serial = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fortran.npz");
    let header = npy_header("<f4", true, &[rows, mib * MIB / 4 / rows]);
    write_deflated_npz(&path, "f.npy", &header, &period_block(), mib);
    measure(what, &path, mib * MIB);
}

#[test]
fn fortran_array_of_256_mib() {
    fortran_npy("Fortran 256 MiB .npy", &[8192, 8192]);
}

#[test]
fn fortran_member_deflated_of_64_mib() {
    deflated_fortran_member("deflated Fortran 64 MiB member", 64, 2048);
}

// ---- Fortran-order arrays with long rows -------------------------------------------
//
// One first-axis row (every other axis in full) here is 36 MB, over the bound:
// the reader must not hold a row, only tiles of one.

#[test]
fn fortran_array_with_long_rows() {
    fortran_npy("Fortran .npy, 36 MB rows", &[3, 1001, 9001]);
}

#[test]
fn fortran_member_deflated_with_long_rows() {
    // 2 x 9437184 f4: two rows of 36 MiB.
    deflated_fortran_member("deflated Fortran member, 36 MiB rows", 72, 2);
}

// ---- zip64: a member over 4 GiB -----------------------------------------------------

/// A local header; sizes over 32 bits go in a zip64 extra (as numpy writes them).
fn local_header(
    out: &mut Vec<u8>,
    name: &str,
    method: u16,
    crc: u32,
    compressed: u64,
    uncompressed: u64,
    zip64: Option<()>,
) {
    let wide = zip64.is_some() || uncompressed > 0xFFFF_FFFE || compressed > 0xFFFF_FFFE;
    le32(out, 0x0403_4b50);
    le16(out, if wide { 45 } else { 20 });
    le16(out, 0);
    le16(out, method);
    le16(out, 0);
    le16(out, 0x21);
    le32(out, crc);
    le32(out, if wide { 0xFFFF_FFFF } else { compressed as u32 });
    le32(
        out,
        if wide {
            0xFFFF_FFFF
        } else {
            uncompressed as u32
        },
    );
    le16(out, name.len() as u16);
    le16(out, if wide { 20 } else { 0 });
    out.extend_from_slice(name.as_bytes());
    if wide {
        le16(out, 1);
        le16(out, 16);
        le64(out, uncompressed);
        le64(out, compressed);
    }
}

/// A central entry with a zip64 extra holding only the fields that overflow.
fn central_entry(
    out: &mut Vec<u8>,
    name: &str,
    method: u16,
    crc: u32,
    compressed: u64,
    uncompressed: u64,
    offset: u64,
) {
    let big = |x: u64| x > 0xFFFF_FFFE;
    let mut extra = Vec::new();
    for x in [uncompressed, compressed, offset] {
        if big(x) {
            le64(&mut extra, x);
        }
    }
    let clip = |x: u64| if big(x) { 0xFFFF_FFFF } else { x as u32 };
    le32(out, 0x0201_4b50);
    le16(out, 0x032d);
    le16(out, 45);
    le16(out, 0);
    le16(out, method);
    le16(out, 0);
    le16(out, 0x21);
    le32(out, crc);
    le32(out, clip(compressed));
    le32(out, clip(uncompressed));
    le16(out, name.len() as u16);
    le16(
        out,
        if extra.is_empty() {
            0
        } else {
            extra.len() as u16 + 4
        },
    );
    le16(out, 0);
    le16(out, 0);
    le16(out, 0);
    le32(out, 0o600 << 16);
    le32(out, clip(offset));
    out.extend_from_slice(name.as_bytes());
    if !extra.is_empty() {
        le16(out, 1);
        le16(out, extra.len() as u16);
        out.extend_from_slice(&extra);
    }
}

/// The CRC-32 state of `len` zero bytes, by doubling and combining.
fn zeros_crc(len: u64) -> crc32fast::Hasher {
    let mut out = crc32fast::Hasher::new();
    let mut power = crc32fast::Hasher::new();
    power.update(&[0]);
    let mut bit = 0;
    while len >> bit != 0 {
        if len >> bit & 1 == 1 {
            out.combine(&power);
        }
        let copy = power.clone();
        power.combine(&copy);
        bit += 1;
    }
    out
}

/// The layout of the zip64 archive.
struct Zip64 {
    path: std::path::PathBuf,
    /// Elements (u8) of the big array.
    n: u64,
    first: Vec<u8>,
    last: Vec<u8>,
    small: Vec<u8>,
}

/// An npz of two stored members: `big.npy`, a u8 array of just over 4 GiB
/// whose first and last MiB hold a pattern and the rest is a hole of
/// zeros, and `small.npy` after it, past the 4 GiB mark.
fn write_zip64(dir: &Path) -> Zip64 {
    let n = (4 << 30) + MIB + 123;
    let header = npy_header("|u1", false, &[n]);
    let first: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8 + 1).collect();
    let last: Vec<u8> = (0..MIB).map(|i| (i % 241) as u8 + 3).collect();
    let member_len = header.len() as u64 + n;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header);
    crc.update(&first);
    crc.combine(&zeros_crc(n - 2 * MIB));
    crc.combine(&{
        let mut h = crc32fast::Hasher::new();
        h.update(&last);
        h
    });
    let crc = crc.finalize();
    let path = dir.join("zip64.npz");
    let f = File::create(&path).unwrap();
    let mut local = Vec::new();
    local_header(&mut local, "big.npy", 0, crc, member_len, member_len, None);
    f.write_all_at(&local, 0).unwrap();
    let data_at = local.len() as u64;
    f.write_all_at(&header, data_at).unwrap();
    f.write_all_at(&first, data_at + header.len() as u64)
        .unwrap();
    let end = data_at + member_len;
    f.write_all_at(&last, end - MIB).unwrap();
    // The second member, past 4 GiB.
    let small = support::numpy::npy("<i8", false, &[3], &[7; 24]);
    let small_crc = crc32fast::hash(&small);
    let small_at = end;
    let mut tail = Vec::new();
    local_header(
        &mut tail,
        "small.npy",
        0,
        small_crc,
        small.len() as u64,
        small.len() as u64,
        Some(()),
    );
    tail.extend_from_slice(&small);
    let dir_offset = small_at + tail.len() as u64;
    let mut central = Vec::new();
    central_entry(&mut central, "big.npy", 0, crc, member_len, member_len, 0);
    central_entry(
        &mut central,
        "small.npy",
        0,
        small_crc,
        small.len() as u64,
        small.len() as u64,
        small_at,
    );
    tail.extend_from_slice(&central);
    let zip64_at = dir_offset + central.len() as u64;
    zip64_eocd(&mut tail, zip64_at, 2, central.len() as u64, dir_offset);
    eocd(&mut tail, 2, central.len() as u64, 0xFFFF_FFFF);
    f.write_all_at(&tail, small_at).unwrap();
    assert!(f.metadata().unwrap().len() > 4 << 30);
    Zip64 {
        path,
        n,
        first,
        last,
        small: small[small.len() - 24..].to_vec(),
    }
}

#[test]
fn zip64_member_over_4_gib() {
    let _serial = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    let z = write_zip64(dir.path());
    // The directory, as the zip reader sees it.
    let file = File::open(&z.path).unwrap();
    let len = file.metadata().unwrap().len();
    let (entries, dir_offset) = read_directory(&file, len).unwrap();
    assert_eq!(entries.len(), 2);
    assert!(dir_offset > 4 << 30);
    let big = &entries[0];
    assert_eq!(big.method, Method::Stored);
    assert_eq!(big.uncompressed, big.compressed);
    assert!(big.uncompressed > 4 << 30);
    assert!(entries[1].local_offset > 4 << 30);
    // The last MiB of the big tensor, where the archive says it is.
    let start = data_start(&file, big, dir_offset).unwrap();
    let mut last = vec![0u8; MIB as usize];
    file.read_exact_at(&mut last, start + big.uncompressed - MIB)
        .unwrap();
    assert_eq!(last, z.last);
    // Listing and planned header.
    let rt = runtime();
    rt.block_on(async {
        let quiet = |_: &safetensors_stream::Note| {};
        let mut src = open_input(&z.path, &SourceOptions::default(), &quiet)
            .await
            .unwrap();
        let listing = Listing::of(src.as_ref());
        let shapes: Vec<(String, Dtype, Vec<u64>)> = listing
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.dtype, t.shape.clone()))
            .collect();
        assert_eq!(
            shapes,
            [
                ("big".to_string(), Dtype::U8, vec![z.n]),
                ("small".to_string(), Dtype::I64, vec![3]),
            ]
        );
        let p = plan(&[listing], &PlanOptions::default()).unwrap();
        let h = p.shards[0].header.header();
        let offsets: Vec<(&str, u64, u64)> = h
            .tensors
            .iter()
            .map(|t| (t.meta.name.as_str(), t.begin, t.end))
            .collect();
        assert_eq!(offsets, [("small", 0, 24), ("big", 24, 24 + z.n)]);
        assert_eq!(h.file_len(), h.data_start() + 24 + z.n);
        // The small member past 4 GiB, in full (its CRC is checked).
        let mut data = src.open(1).await.unwrap();
        let mut b = Vec::new();
        data.reader.read_to_end(&mut b).await.unwrap();
        assert_eq!(b, z.small);
        drop(data);
        // The first MiB of the big one, and the bytes after it.
        let mut data = src.open(0).await.unwrap();
        let mut b = vec![0u8; MIB as usize + 4096];
        data.reader.read_exact(&mut b).await.unwrap();
        assert_eq!(&b[..MIB as usize], &z.first[..]);
        assert!(b[MIB as usize..].iter().all(|&x| x == 0));
    });
}

/// Streams all 4 GiB through the conversion (CRC included). Slow: run with
/// `cargo test --test memory zip64 -- --ignored`.
#[test]
#[ignore]
fn zip64_member_over_4_gib_streamed_in_full() {
    let _serial = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    let z = write_zip64(dir.path());
    measure("zip64 4 GiB member", &z.path, z.n);
}

#[test]
fn the_allocator_counts() {
    let _serial = crate::alloc::serial();
    let (v, peak) = peak_during(|| vec![1u8; 40 << 20]);
    assert!(peak >= 40 << 20, "{peak}");
    drop(v);
}

/// An archive whose zip64 record claims as many directory entries as its
/// length allows (a sparse 1 GiB file: 23 million): refused without
/// reserving room for them first.
#[test]
fn huge_directory_claim_reserves_nothing() {
    let _serial = crate::alloc::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("claim.npz");
    let f = File::create(&path).unwrap();
    let body = 1u64 << 30;
    f.set_len(body).unwrap();
    let mut tail = Vec::new();
    zip64_eocd(&mut tail, body, body / 46, body, 0);
    eocd(&mut tail, 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF);
    f.write_all_at(&tail, body).unwrap();
    f.write_all_at(b"PK\x03\x04", 0).unwrap();
    drop(f);
    let rt = runtime();
    let (r, peak) = peak_during(|| {
        rt.block_on(async {
            let quiet = |_: &safetensors_stream::Note| {};
            open_input(&path, &SourceOptions::default(), &quiet)
                .await
                .map(|_| ())
        })
    });
    let e = r.unwrap_err();
    assert!(
        matches!(e.kind(), safetensors_stream::ErrorKind::Zip(_)),
        "{e:?}"
    );
    assert!(
        peak < 8 << 20,
        "heap peak {peak} bytes for a refused archive"
    );
}

/// Deflated members whose headers (64 KiB each, a few hundred bytes
/// compressed) hold shapes of 20,000 ones: refused at the first, before
/// their shapes fill memory (numpy allows at most 64 dimensions).
#[test]
fn long_shapes_in_tiny_members() {
    let _serial = crate::alloc::serial();
    let dims = vec!["1"; 20_000].join(", ");
    let text = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    let mut member = support::numpy::npy_header_text(&text);
    member.extend_from_slice(&[0; 4]);
    assert!(member.len() > 60_000);
    let members: Vec<support::numpy::ZipMember> = (0..300)
        .map(|i| support::numpy::ZipMember::deflated(&format!("t{i}.npy"), member.clone()))
        .collect();
    let (zip, _) = support::numpy::build_zip(&members);
    assert!(zip.len() < 1 << 20, "{} bytes", zip.len());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long_shapes.npz");
    std::fs::write(&path, &zip).unwrap();
    let rt = runtime();
    let (r, peak) = peak_during(|| {
        rt.block_on(async {
            let quiet = |_: &safetensors_stream::Note| {};
            open_input(&path, &SourceOptions::default(), &quiet)
                .await
                .map(|_| ())
        })
    });
    let e = r.unwrap_err();
    assert!(
        matches!(e.kind(), safetensors_stream::ErrorKind::NpyHeader(_)),
        "{e:?}"
    );
    assert!(peak < 8 << 20, "heap peak {peak} bytes");
}
