//! Hand-built hostile .npz archives and .npy files: each must be refused
//! with a typed error (the `ErrorKind` variant that names the broken rule),
//! never a panic, an I/O error standing in for one, a huge allocation, or a
//! file written.

use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use safetensors_stream::convert::{convert, ConvertOptions, Output};
use safetensors_stream::{Category, Error, ErrorKind, HeaderError, ZipError};
use support::numpy::{
    block_on, build_zip, deflate, dir_names, eocd, npy, npy_header, npy_header_text, put16, put32,
    tensors_of, zip64_eocd, zip64_locator, ZipMember,
};

/// Writes `bytes` as `name` in a temp dir and converts it into that dir.
fn convert_bytes(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf, Result<(), Error>) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join(name);
    std::fs::write(&input, bytes).unwrap();
    let out = dir.path().join("out.safetensors");
    let options = ConvertOptions::default().sync(false);
    let r = block_on(convert(
        std::slice::from_ref(&input),
        &Output::File(out.clone()),
        &options,
    ));
    (dir, out, r.map(|_| ()))
}

/// Converts `bytes`, which must be refused: returns the error after checking
/// it is a bad-input error naming the input, and that nothing was written.
fn refuse(name: &str, bytes: &[u8]) -> Error {
    let (dir, _, r) = convert_bytes(name, bytes);
    let e = r.expect_err("a hostile input was accepted");
    assert_eq!(e.category(), Category::BadInput, "{name}: {e:?}");
    let input = dir.path().join(name);
    assert_eq!(e.input(), Some(input.display().to_string().as_str()), "{e}");
    assert_eq!(
        dir_names(dir.path()),
        [name.to_string()],
        "output left behind"
    );
    e
}

fn is_zip(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Zip(_))
}

fn member(name: &str, data: Vec<u8>) -> ZipMember {
    ZipMember::stored(name, data)
}

fn small_npy() -> Vec<u8> {
    npy("<f4", false, &[4], &[0x3f; 16])
}

fn ok_zip() -> (Vec<u8>, support::numpy::ZipLayout) {
    build_zip(&[member("a.npy", small_npy()), member("b.npy", small_npy())])
}

// ---- the end records and the central directory -------------------------------

#[test]
fn a_million_members_in_a_tiny_directory() {
    let (mut zip, l) = ok_zip();
    zip.truncate(l.eocd as usize);
    let at = zip.len() as u64;
    zip64_eocd(&mut zip, at, 1_000_000, l.dir_size, l.dir_offset);
    eocd(&mut zip, 0xFFFF, l.dir_size, l.dir_offset);
    let e = refuse("million.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
    assert!(e.to_string().contains("1000000 entries"), "{e}");
}

#[test]
fn many_members_claimed_by_the_classic_record() {
    let (mut zip, l) = ok_zip();
    put16(&mut zip, l.eocd + 8, 0xFFFE);
    put16(&mut zip, l.eocd + 10, 0xFFFE);
    let e = refuse("many.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
}

#[test]
fn directory_outside_the_file() {
    let (mut zip, l) = ok_zip();
    let past = zip.len() as u32 + 1000;
    put32(&mut zip, l.eocd + 16, past);
    assert!(is_zip(&refuse("outside.npz", &zip)));
    // Offset plus size wraps around 64 bits, through the zip64 record.
    let (mut zip, l) = ok_zip();
    zip.truncate(l.eocd as usize);
    let at = zip.len() as u64;
    zip64_eocd(&mut zip, at, 2, 0xFFFF_FFFF_FFFF_FF00, 0x1000);
    eocd(&mut zip, 2, 0xFFFF_FFFF, 0xFFFF_FFFF);
    assert!(is_zip(&refuse("wrap.npz", &zip)));
}

#[test]
fn directory_pointing_at_itself_or_at_the_end_record() {
    let (mut zip, l) = ok_zip();
    // At the end record, sized to cover it.
    put32(&mut zip, l.eocd + 16, l.eocd as u32);
    put32(&mut zip, l.eocd + 12, 22);
    assert!(is_zip(&refuse("at_eocd.npz", &zip)));
    // At the first local header: not a central directory entry.
    let (mut zip, l) = ok_zip();
    put32(&mut zip, l.eocd + 16, 0);
    put32(
        &mut zip,
        l.eocd + 12,
        l.dir_offset as u32 + l.dir_size as u32,
    );
    assert!(is_zip(&refuse("at_local.npz", &zip)));
    // A member whose local header is the central directory.
    let (mut zip, l) = ok_zip();
    put32(&mut zip, l.centrals[1] + 42, l.dir_offset as u32);
    assert!(is_zip(&refuse("member_at_dir.npz", &zip)));
}

#[test]
fn end_record_comment_length_lies() {
    // Claims a 100-byte comment; 10 bytes follow.
    let (mut zip, l) = ok_zip();
    put16(&mut zip, l.eocd + 20, 100);
    zip.extend_from_slice(b"0123456789");
    assert!(is_zip(&refuse("comment_long.npz", &zip)));
    // Claims none; 10 bytes follow.
    let (mut zip, _) = ok_zip();
    zip.extend_from_slice(b"0123456789");
    assert!(is_zip(&refuse("comment_short.npz", &zip)));
    // Claims 65535, and the file is shorter than that.
    let (mut zip, l) = ok_zip();
    put16(&mut zip, l.eocd + 20, 0xFFFF);
    assert!(is_zip(&refuse("comment_max.npz", &zip)));
}

#[test]
fn an_honest_comment_is_fine() {
    let (mut zip, l) = ok_zip();
    put16(&mut zip, l.eocd + 20, 5);
    zip.extend_from_slice(b"hello");
    let (_d, out, r) = convert_bytes("comment.npz", &zip);
    r.unwrap();
    assert_eq!(tensors_of(&std::fs::read(out).unwrap()).len(), 2);
}

#[test]
fn zip64_locator_pointing_past_the_end() {
    let (mut zip, l) = ok_zip();
    zip.truncate(l.eocd as usize);
    zip64_locator(&mut zip, 1 << 40);
    eocd(&mut zip, 2, l.dir_size, l.dir_offset);
    assert!(is_zip(&refuse("locator_past.npz", &zip)));
    // At itself: no zip64 record there.
    let (mut zip, l) = ok_zip();
    zip.truncate(l.eocd as usize);
    let at = zip.len() as u64;
    zip64_locator(&mut zip, at);
    eocd(&mut zip, 2, l.dir_size, l.dir_offset);
    assert!(is_zip(&refuse("locator_self.npz", &zip)));
    // Just before itself: a zip64 record overlapping the locator.
    let (mut zip, l) = ok_zip();
    zip.truncate(l.eocd as usize);
    let at = zip.len() as u64 - 30;
    zip64_locator(&mut zip, at);
    eocd(&mut zip, 2, l.dir_size, l.dir_offset);
    assert!(is_zip(&refuse("locator_overlap.npz", &zip)));
}

#[test]
fn zip64_record_with_a_lying_directory() {
    let (mut zip, l) = ok_zip();
    zip.truncate(l.eocd as usize);
    let at = zip.len() as u64;
    // Points the directory at the zip64 record itself.
    zip64_eocd(&mut zip, at, 1, 56, at);
    eocd(&mut zip, 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF);
    assert!(is_zip(&refuse("zip64_self.npz", &zip)));
}

#[test]
fn duplicate_member_names() {
    let (zip, _) = build_zip(&[
        member("a.npy", small_npy()),
        member("b.npy", small_npy()),
        member("a.npy", npy("|u1", false, &[1], &[7])),
    ]);
    let e = refuse("dup.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
    assert!(e.to_string().contains("twice"), "{e}");
}

#[test]
fn truncated_and_tiny_archives() {
    let (zip, l) = ok_zip();
    // Cut inside the central directory: the end record is gone.
    assert!(is_zip(&refuse(
        "cut.npz",
        &zip[..l.dir_offset as usize + 10]
    )));
    // Just the local header magic.
    assert!(is_zip(&refuse("magic.npz", b"PK\x03\x04")));
    // The directory ends inside an entry (its name length runs past it).
    let (mut zip, l) = ok_zip();
    put16(&mut zip, l.centrals[1] + 28, 5000);
    assert!(is_zip(&refuse("name_past.npz", &zip)));
}

#[test]
fn empty_archive_is_refused_unless_empty_output_is_allowed() {
    let mut zip = Vec::new();
    eocd(&mut zip, 0, 0, 0);
    let (d, out, r) = convert_bytes("empty.npz", &zip);
    assert!(matches!(
        r.unwrap_err().kind(),
        ErrorKind::NothingSelected(_)
    ));
    assert!(!out.exists());
    let options = ConvertOptions::default()
        .sync(false)
        .plan(safetensors_stream::PlanOptions::default().allow_empty(true));
    let input = d.path().join("empty.npz");
    block_on(convert(&[input], &Output::File(out.clone()), &options)).unwrap();
    assert!(tensors_of(&std::fs::read(out).unwrap()).is_empty());
}

// ---- members -------------------------------------------------------------------

#[test]
fn bad_local_headers() {
    let (mut zip, l) = ok_zip();
    zip[l.locals[1] as usize] = b'X';
    assert!(is_zip(&refuse("local_sig.npz", &zip)));
    // Local name and extra lengths that push the data past the directory.
    let (mut zip, l) = ok_zip();
    put16(&mut zip, l.locals[1] + 28, 0xFFFF);
    assert!(is_zip(&refuse("local_extra.npz", &zip)));
    // A member whose compressed size runs into the directory.
    let (mut zip, l) = ok_zip();
    put32(&mut zip, l.centrals[1] + 20, 0x1000);
    put32(&mut zip, l.centrals[1] + 24, 0x1000);
    assert!(is_zip(&refuse("past_dir.npz", &zip)));
}

#[test]
fn unsupported_members() {
    for (what, at, value) in [
        ("bzip2", 10u64, 12u16),
        ("lzma", 10, 14),
        ("encrypted", 8, 1),
    ] {
        let (mut zip, l) = ok_zip();
        put16(&mut zip, l.centrals[0] + at, value);
        let e = refuse(&format!("{what}.npz"), &zip);
        // A well-formed zip using a feature we do not read: not corrupt.
        assert!(
            matches!(e.kind(), ErrorKind::Zip(ZipError::Unsupported(_))),
            "{what}: {e:?}"
        );
    }
    // Stored, but the two sizes differ.
    let (mut zip, l) = ok_zip();
    put32(&mut zip, l.centrals[0] + 24, 200);
    assert!(is_zip(&refuse("stored_sizes.npz", &zip)));
}

#[test]
fn zip64_extra_too_short() {
    let mut zip = Vec::new();
    // One member whose central entry says 0xFFFFFFFF but has no zip64 extra.
    let (z, l) = build_zip(&[member("a.npy", small_npy())]);
    zip.extend_from_slice(&z);
    put32(&mut zip, l.centrals[0] + 24, 0xFFFF_FFFF);
    assert!(is_zip(&refuse("no_extra.npz", &zip)));
}

#[test]
fn member_with_a_wrong_crc() {
    let mut m = member("w.npy", small_npy());
    m.crc = Some(0xDEAD_BEEF);
    let mut d = ZipMember::deflated("d.npy", npy("<i8", false, &[100], &[5; 800]));
    d.crc = Some(0x1234_5678);
    // A Fortran-order member is read out of order: its CRC must still be checked.
    let mut f = member("f.npy", npy("<f4", true, &[3, 4], &[1; 48]));
    f.crc = Some(0x0BAD_F00D);
    // A large stored member is copied by the kernel while a second thread checks it.
    let mut big = member(
        "big.npy",
        npy("<u1", false, &[3 << 20], &vec![7u8; 3 << 20]),
    );
    big.crc = Some(0x0BAD_CAFE);
    for (label, m) in [
        ("stored", m),
        ("deflated", d),
        ("fortran", f),
        ("large", big),
    ] {
        let want = m.crc.unwrap();
        let (zip, _) = build_zip(&[m]);
        let e = refuse(&format!("crc_{label}.npz"), &zip);
        // One kind for a bad CRC, whichever driver found it.
        assert!(
            matches!(e.kind(), ErrorKind::Zip(ZipError::CrcMismatch { expected, .. }) if *expected == want),
            "{label}: {e:?}"
        );
        assert!(e.tensor().is_some(), "{e}");
    }
}

#[test]
fn member_shorter_or_longer_than_its_npy_header() {
    let mut short = npy_header("<f4", false, &[100]);
    short.extend_from_slice(&[0; 200]);
    let mut long = npy_header("<f4", false, &[10]);
    long.extend_from_slice(&[0; 44]);
    for (label, data) in [("short", short), ("long", long)] {
        for deflated in [false, true] {
            let m = if deflated {
                ZipMember::deflated("t.npy", data.clone())
            } else {
                member("t.npy", data.clone())
            };
            let (zip, _) = build_zip(&[m]);
            let e = refuse(&format!("{label}_{deflated}.npz"), &zip);
            assert!(
                matches!(e.kind(), ErrorKind::DataLength { .. }),
                "{label}: {e:?}"
            );
            assert_eq!(e.tensor(), Some("t"), "{e}");
        }
    }
}

#[test]
fn member_ends_inside_its_npy_header() {
    let h = npy_header("<f4", false, &[4]);
    let (zip, _) = build_zip(&[member("t.npy", h[..40].to_vec())]);
    let e = refuse("header_cut.npz", &zip);
    assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{e:?}");
}

#[test]
fn deflate_stream_that_is_corrupt_or_cut() {
    let noise: Vec<u8> = (0..4000u32)
        .map(|i| (i.wrapping_mul(7919) % 251) as u8)
        .collect();
    let data = npy("<i4", false, &[1000], &noise);
    let good = deflate(&data);
    // Block type 3 (reserved) right after the header's blocks: corrupt.
    let mut corrupt = good.clone();
    let n = corrupt.len();
    for b in &mut corrupt[n / 2..] {
        *b = 0xFF;
    }
    // Cut: the stream stops before its final block.
    let cut = good[..good.len() / 2].to_vec();
    for (label, raw) in [("corrupt", corrupt), ("cut", cut)] {
        let mut m = ZipMember::deflated("t.npy", data.clone());
        m.raw = Some(raw);
        let (zip, _) = build_zip(&[m]);
        let e = refuse(&format!("{label}.npz"), &zip);
        // Bad archive bytes are bad input, not an I/O failure.
        assert!(
            is_zip(&e) || matches!(e.kind(), ErrorKind::NpyHeader(_)),
            "{label}: {e:?}"
        );
    }
}

/// A deflate stream of `header` then `mib` MiB of zeros, built from one
/// sync-flushed 1 MiB chunk repeated (its back-references see only zeros).
fn zeros_bomb(header: &[u8], mib: usize) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(header).unwrap();
    e.write_all(&zeros).unwrap();
    e.flush().unwrap();
    let first = e.get_ref().len();
    e.write_all(&zeros).unwrap();
    e.flush().unwrap();
    let second = e.get_ref().len();
    let tail = e.finish().unwrap();
    let chunk = tail[first..second].to_vec();
    let mut out = tail[..first].to_vec();
    for _ in 1..mib {
        out.extend_from_slice(&chunk);
    }
    out.extend_from_slice(&tail[second..]);
    out
}

#[test]
fn deflate_bomb_stops_at_its_declared_size() {
    // Declares 16 bytes of u8 data; inflates to 1 GiB.
    let header = npy_header("|u1", false, &[16]);
    let declared = header.len() as u64 + 16;
    let bomb = zeros_bomb(&header, 1024);
    assert!(bomb.len() < 2 << 20, "{} bytes", bomb.len());
    let mut m = ZipMember::deflated("bomb.npy", header.clone());
    m.raw = Some(bomb);
    m.uncompressed = Some(declared);
    let (zip, _) = build_zip(&[m]);
    let start = Instant::now();
    let e = refuse("bomb.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
    assert!(e.to_string().contains("inflates past"), "{e}");
    assert_eq!(e.tensor(), Some("bomb"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn deflate_bomb_is_never_inflated_past_its_size() {
    // After the first MiB, the stream is garbage: a reader that inflated
    // more than the declared size plus one byte would report corrupt data.
    let header = npy_header("|u1", false, &[16]);
    let mut bomb = zeros_bomb(&header, 1);
    let end = bomb.len() - 2; // drop the final empty block
    bomb.truncate(end);
    bomb.extend_from_slice(&[0xFF; 64]);
    let mut m = ZipMember::deflated("bomb.npy", header.clone());
    m.raw = Some(bomb);
    m.uncompressed = Some(header.len() as u64 + 16);
    let (zip, _) = build_zip(&[m]);
    let e = refuse("lazy_bomb.npz", &zip);
    assert!(e.to_string().contains("inflates past"), "{e}");
}

#[test]
fn deflated_member_that_ends_early() {
    // The stream ends (final block) after 100 data bytes; the zip says 4000.
    let short = npy("<i4", false, &[1000], &[1; 100]);
    let header_len = npy_header("<i4", false, &[1000]).len() as u64;
    let mut m = ZipMember::deflated("t.npy", short);
    m.uncompressed = Some(header_len + 4000);
    let (zip, _) = build_zip(&[m]);
    let e = refuse("early.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
}

#[test]
fn overlapping_members_are_refused() {
    // Two names for one member's bytes: the non-recursive zip bomb's trick.
    let (mut zip, l) = build_zip(&[member("a.npy", small_npy()), member("b.npy", small_npy())]);
    // b's central entry points at a's local header (same sizes and CRC).
    put32(&mut zip, l.centrals[1] + 42, l.locals[0] as u32);
    let e = refuse("overlap.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
    assert!(e.to_string().contains("overlap"), "{e}");
}

// ---- .npy headers ----------------------------------------------------------------

fn v2_npy(text: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY\x02\x00".to_vec();
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text);
    out
}

#[test]
fn npy_header_claiming_a_million_bytes() {
    let mut f = b"\x93NUMPY\x02\x00".to_vec();
    f.extend_from_slice(&1_000_000u32.to_le_bytes());
    f.extend_from_slice(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }");
    let e = refuse("huge.npy", &f);
    assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{e:?}");
    // Present in full: still refused, by the limit, not by the length.
    let mut text = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }".to_vec();
    text.resize(1_000_000, b' ');
    let mut f = v2_npy(&text);
    f.extend_from_slice(&[0; 4]);
    let e = refuse("huge_present.npy", &f);
    assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{e:?}");
    assert!(e.to_string().contains("limit"), "{e}");
    // The same, as an npz member.
    let (zip, _) = build_zip(&[member("h.npy", f)]);
    let e = refuse("huge_member.npz", &zip);
    assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{e:?}");
    assert_eq!(e.tensor(), Some("h"));
}

#[test]
fn deeply_nested_header_literals() {
    for (open, close) in [("[", "]"), ("(", ",)"), ("{'a': ", "}")] {
        let depth = 5_000;
        let text = format!(
            "{{'descr': {}'<f4'{}, 'fortran_order': False, 'shape': (1,), }}",
            open.repeat(depth),
            close.repeat(depth)
        );
        assert!(text.len() < 64 * 1024);
        let mut f = v2_npy(text.as_bytes());
        f.extend_from_slice(&[0; 4]);
        let e = refuse("nested.npy", &f);
        assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{open}: {e:?}");
        // Also in an npz member, deflated.
        let (zip, _) = build_zip(&[ZipMember::deflated("n.npy", f)]);
        let e = refuse("nested.npz", &zip);
        assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{open}: {e:?}");
    }
}

#[test]
fn malformed_npy_headers() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not a dict", npy_header_text("['<f4', False, (1,)]")),
        (
            "no shape",
            npy_header_text("{'descr': '<f4', 'fortran_order': False}"),
        ),
        (
            "no descr",
            npy_header_text("{'fortran_order': False, 'shape': (1,)}"),
        ),
        (
            "extra key",
            npy_header_text("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"),
        ),
        (
            "negative dim",
            npy_header_text("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),
        ),
        (
            "float dim",
            npy_header_text("{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,)}"),
        ),
        (
            "huge dim",
            npy_header_text(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
            ),
        ),
        (
            "fortran not bool",
            npy_header_text("{'descr': '<f4', 'fortran_order': 1, 'shape': (1,)}"),
        ),
        ("unterminated", npy_header_text("{'descr': '<f4")),
        (
            "garbage after",
            npy_header_text("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x"),
        ),
        ("empty", npy_header_text("")),
        // numpy's limit is 64 dimensions (the long_header fixture has 64).
        ("65 dims", npy_header("<f4", false, &[1; 65])),
    ];
    for (label, mut f) in cases {
        f.extend_from_slice(&[0; 4]);
        let e = refuse("bad.npy", &f);
        assert!(
            matches!(e.kind(), ErrorKind::NpyHeader(_)),
            "{label}: {e:?}"
        );
    }
    // Version 3 promises UTF-8.
    let mut f = b"\x93NUMPY\x03\x00".to_vec();
    let text = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), '\xff': 1}\n";
    f.extend_from_slice(&(text.len() as u32).to_le_bytes());
    f.extend_from_slice(text);
    let e = refuse("v3.npy", &f);
    assert!(matches!(e.kind(), ErrorKind::NpyHeader(_)), "{e:?}");
}

#[test]
fn shapes_that_overflow() {
    let f = npy("<f4", false, &[1 << 40, 1 << 40], &[]);
    let e = refuse("overflow.npy", &f);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::ShapeOverflow { .. })
        ),
        "{e:?}"
    );
    let (zip, _) = build_zip(&[member("o.npy", f)]);
    let e = refuse("overflow.npz", &zip);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::ShapeOverflow { .. })
        ),
        "{e:?}"
    );
}

#[test]
fn fortran_array_with_a_long_row_is_accepted() {
    // 2 x 2^27 f4, Fortran order: one first-axis row is 512 MiB. A sparse
    // file. It is read in tiles, never a row at a time, so it is no longer
    // refused: opened and listed here (numpy_memory converts long rows).
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("wide.npy");
    let h = npy_header("<f4", true, &[2, 1 << 27]);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(&h).unwrap();
    f.set_len(h.len() as u64 + (1 << 30)).unwrap();
    drop(f);
    let quiet = |_: &safetensors_stream::Note| {};
    let options = safetensors_stream::source::SourceOptions::default();
    let src = block_on(safetensors_stream::source::open_input(&p, &options, &quiet)).unwrap();
    assert_eq!(src.tensors()[0].shape, [2, 1 << 27]);
}

// ---- names -------------------------------------------------------------------------

#[test]
fn member_names_are_only_tensor_names() {
    let names = [
        "../x.npy",
        "/etc/passwd.npy",
        "..\\win.npy",
        "a/../../b.npy",
        "c:/d.npy",
    ];
    let members: Vec<ZipMember> = names.iter().map(|n| member(n, small_npy())).collect();
    let (zip, _) = build_zip(&members);
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    let input = inner.join("paths.npz");
    std::fs::write(&input, &zip).unwrap();
    let out = inner.join("out.safetensors");
    let options = ConvertOptions::default().sync(false);
    block_on(convert(&[input], &Output::File(out.clone()), &options)).unwrap();
    let got = tensors_of(&std::fs::read(&out).unwrap());
    let want: Vec<String> = names
        .iter()
        .map(|n| n.strip_suffix(".npy").unwrap().to_string())
        .collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), want_sorted);
    // Nothing appeared outside (or inside) the folders besides input and output.
    assert_eq!(dir_names(dir.path()), ["inner"]);
    assert_eq!(dir_names(&inner), ["out.safetensors", "paths.npz"]);
    assert!(!Path::new("/etc/passwd.safetensors").exists());
}

#[test]
fn reserved_and_odd_member_names() {
    // `__metadata__.npy` would be a tensor the format forbids.
    let (zip, _) = build_zip(&[member("__metadata__.npy", small_npy())]);
    let (dir, _, r) = convert_bytes("reserved.npz", &zip);
    let e = r.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::ReservedName)),
        "{e:?}"
    );
    assert_eq!(dir_names(dir.path()), ["reserved.npz"]);
    // Two names that decode to the same string (invalid UTF-8 under the UTF-8 flag).
    let a = member("x\u{80}.npy", small_npy());
    let b = member("x\u{81}.npy", small_npy());
    let (mut zip, l) = build_zip(&[a, b]);
    // Replace the 2-byte UTF-8 of U+0080 / U+0081 by lone continuation bytes.
    for (i, c) in l.centrals.iter().enumerate() {
        let name_at = (c + 46) as usize;
        zip[name_at + 1] = 0xFF;
        zip[name_at + 2] = 0xFE - i as u8;
    }
    // Each invalid byte becomes U+FFFD: "x\u{FFFD}\u{FFFD}.npy" twice.
    let e = refuse("lossy.npz", &zip);
    assert!(is_zip(&e), "{e:?}");
}

// ---- inputs that are nothing at all ----------------------------------------------

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn unknown_and_empty_inputs() {
    let noise: Vec<u8> = (0..1000u32).map(|i| (i * 37 % 256) as u8).collect();
    let thrice = gzip(&gzip(&gzip(&small_npy())));
    for (name, bytes) in [
        ("empty.npy", Vec::new()),
        ("noise.bin", noise.clone()),
        ("noise.bin.gz", gzip(&noise)),
        ("empty.npy.gz", gzip(&[])),
        ("thrice.npy.gz", thrice),
    ] {
        let e = refuse(name, &bytes);
        // An empty input is said for what it is (issue 42.6), the rest may be raw dumps.
        if name.starts_with("empty") {
            assert!(
                matches!(e.kind(), ErrorKind::BrokenDownload(_)),
                "{name}: {e:?}"
            );
            assert!(e.to_string().contains("the input is empty"), "{e}");
            continue;
        }
        assert!(
            matches!(e.kind(), ErrorKind::UnknownFormat(_)),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains("--raw-dtype"), "{e}");
    }
    // Not gzip after all: a gzip magic, then garbage.
    let mut bad = b"\x1f\x8b\x08\x00".to_vec();
    bad.extend_from_slice(&noise);
    let e = refuse("bad.npy.gz", &bad);
    assert!(matches!(e.kind(), ErrorKind::Decompress { .. }), "{e:?}");
}

// ---- many members, listed on two threads ------------------------------------

/// 3,000 members (listed in two halves on two threads); `bad` ones get a
/// header that is not an npy header, `foreign` ones are not `.npy` at all.
fn many_members(bad: &[usize], foreign: &[usize]) -> Vec<u8> {
    let members: Vec<ZipMember> = (0..3000)
        .map(|k| match (bad.contains(&k), foreign.contains(&k)) {
            (true, _) => member(&format!("t{k}.npy"), b"not an npy header at all".to_vec()),
            (_, true) => member(&format!("t{k}.txt"), b"text".to_vec()),
            _ => member(
                &format!("t{k}.npy"),
                npy("<f4", false, &[1], &(k as f32).to_le_bytes()),
            ),
        })
        .collect();
    build_zip(&members).0
}

#[test]
fn many_members_list_in_order_and_the_first_bad_one_in_the_directory_is_the_error() {
    let (_dir, out, r) = convert_bytes("many.npz", &many_members(&[], &[]));
    r.unwrap();
    let tensors = tensors_of(&std::fs::read(out).unwrap());
    assert_eq!(tensors.len(), 3000);
    assert_eq!(tensors["t2999"].data, 2999f32.to_le_bytes());
    // Bad members in both halves: the one first in the directory is named.
    for (bad, foreign, first) in [
        (vec![2500, 700], vec![], "t700"),
        (vec![2999], vec![1600], "t1600.txt"),
        (vec![10], vec![1600], "t10"),
    ] {
        let e = refuse("many.npz", &many_members(&bad, &foreign));
        assert!(e.to_string().contains(first), "{first}: {e}");
    }
}
