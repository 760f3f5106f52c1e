//! Helpers for the NumPy source tests (numpy::sources, conformance,
//! numpy::hostile, numpy_memory): the fixtures' case list, expected outputs,
//! and hand-built .npy files and zip archives.

pub use super::{block_on, fixtures, listing as dir_names, write as write_file};

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors_stream::header::{parse_file_bytes, Rules};
use safetensors_stream::Dtype;

/// One row of `fixtures/cases.json`.
#[derive(Debug, Clone)]
pub struct Case {
    pub kind: String,
    /// Relative to `fixtures/`.
    pub input: String,
    pub expected: Option<String>,
    pub error: Option<String>,
    pub note: Option<String>,
}

impl Case {
    pub fn input_path(&self) -> PathBuf {
        fixtures().join(&self.input)
    }

    pub fn expected_path(&self) -> Option<PathBuf> {
        self.expected.as_ref().map(|e| fixtures().join(e))
    }

    /// The input's file name without its folders.
    pub fn file_name(&self) -> &str {
        self.input.rsplit('/').next().unwrap()
    }
}

/// Every row of `fixtures/cases.json`, in order.
pub fn cases() -> Vec<Case> {
    let text = std::fs::read(fixtures().join("cases.json")).expect("cases.json");
    let v: serde_json::Value = serde_json::from_slice(&text).expect("cases.json is JSON");
    let s = |x: &serde_json::Value| x.as_str().map(str::to_string);
    v.as_array()
        .expect("a list")
        .iter()
        .map(|c| Case {
            kind: s(&c["kind"]).expect("kind"),
            input: s(&c["input"]).expect("input"),
            expected: s(&c["expected"]),
            error: s(&c["error"]),
            note: s(&c["note"]),
        })
        .collect()
}

/// A tensor as an expected file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// The tensors of a safetensors file, by name.
pub fn tensors_of(file: &[u8]) -> BTreeMap<String, Expected> {
    let header = parse_file_bytes(file, Rules::STRICT).expect("a valid safetensors file");
    let start = header.data_start() as usize;
    header
        .tensors
        .iter()
        .map(|t| {
            let data = file[start + t.begin as usize..start + t.end as usize].to_vec();
            let e = Expected {
                dtype: t.meta.dtype,
                shape: t.meta.shape.clone(),
                data,
            };
            (t.meta.name.clone(), e)
        })
        .collect()
}

// ---- .npy ------------------------------------------------------------------

/// A version 1.0 .npy header for `descr`, padded as numpy pads it (to 64 bytes).
pub fn npy_header(descr: &str, fortran: bool, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let f = if fortran { "True" } else { "False" };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': {f}, 'shape': {shape_text}, }}");
    npy_header_text(&dict)
}

/// A version 1.0 .npy header holding `dict` as its text, space-padded and
/// newline-terminated so that the data starts at a multiple of 64.
pub fn npy_header_text(dict: &str) -> Vec<u8> {
    let mut text = dict.as_bytes().to_vec();
    let total = (10 + text.len() + 1).div_ceil(64) * 64;
    text.resize(total - 10 - 1, b' ');
    text.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(text.len()).unwrap().to_le_bytes());
    out.extend_from_slice(&text);
    out
}

/// A whole .npy: header and data.
pub fn npy(descr: &str, fortran: bool, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let mut out = npy_header(descr, fortran, shape);
    out.extend_from_slice(data);
    out
}

// ---- zip ---------------------------------------------------------------------

/// How a member is written.
#[derive(Debug, Clone)]
pub struct ZipMember {
    pub name: String,
    /// The uncompressed bytes.
    pub data: Vec<u8>,
    pub deflate: bool,
    /// Bit 3: sizes and CRC in a data descriptor after the data (zip64 form, with signature).
    pub descriptor: bool,
    /// numpy's habit: local sizes 0xFFFFFFFF with a zip64 extra holding the real ones.
    pub zip64_local: bool,
    /// Overrides of what the records say.
    pub crc: Option<u32>,
    pub uncompressed: Option<u64>,
    /// Replaces the compressed bytes (the records' compressed size follows them).
    pub raw: Option<Vec<u8>>,
}

impl ZipMember {
    pub fn stored(name: &str, data: Vec<u8>) -> Self {
        ZipMember {
            name: name.to_string(),
            data,
            deflate: false,
            descriptor: false,
            zip64_local: false,
            crc: None,
            uncompressed: None,
            raw: None,
        }
    }

    pub fn deflated(name: &str, data: Vec<u8>) -> Self {
        ZipMember {
            deflate: true,
            ..ZipMember::stored(name, data)
        }
    }
}

/// Raw deflate of `data`.
pub fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// Where the parts of a built archive are.
#[derive(Debug, Clone, Default)]
pub struct ZipLayout {
    /// Offset of each member's local header.
    pub locals: Vec<u64>,
    /// Offset of each member's central directory entry.
    pub centrals: Vec<u64>,
    /// Offset and size of the central directory.
    pub dir_offset: u64,
    pub dir_size: u64,
    /// Offset of the end-of-central-directory record.
    pub eocd: u64,
}

pub fn le16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}

pub fn le32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

pub fn le64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// An npz of `n` members `layer.{k}.w.npy`, each a stored one-element
/// `<f4` holding `k` (a giant directory of tiny members), and its layout;
/// the members are freed before it returns, so they are not counted in a
/// peak measured afterwards.
pub fn many_members(n: usize) -> (Vec<u8>, ZipLayout) {
    let members: Vec<ZipMember> = (0..n)
        .map(|k| {
            let data = npy("<f4", false, &[1], &(k as f32).to_le_bytes());
            ZipMember::stored(&format!("layer.{k}.w.npy"), data)
        })
        .collect();
    build_zip(&members)
}

/// A zip archive of `members` (the classic EOCD only).
pub fn build_zip(members: &[ZipMember]) -> (Vec<u8>, ZipLayout) {
    let mut out = Vec::new();
    let mut layout = ZipLayout::default();
    let mut central = Vec::new();
    for m in members {
        let body = match (&m.raw, m.deflate) {
            (Some(raw), _) => raw.clone(),
            (None, true) => deflate(&m.data),
            (None, false) => m.data.clone(),
        };
        let crc = m.crc.unwrap_or_else(|| crc32fast::hash(&m.data));
        let usize_ = m.uncompressed.unwrap_or(m.data.len() as u64);
        let csize = body.len() as u64;
        let method = if m.deflate { 8 } else { 0 };
        let utf8 = if m.name.is_ascii() { 0 } else { 1 << 11 };
        let flags: u16 = utf8 | if m.descriptor { 1 << 3 } else { 0 };
        let local_at = out.len() as u64;
        layout.locals.push(local_at);
        // Local header.
        le32(&mut out, 0x0403_4b50);
        le16(&mut out, if m.zip64_local { 45 } else { 20 });
        le16(&mut out, flags);
        le16(&mut out, method);
        le16(&mut out, 0); // time
        le16(&mut out, 0x21); // 1980-01-01
        let (lcrc, lc, lu) = match (m.descriptor, m.zip64_local) {
            (true, true) => (0, 0xFFFF_FFFF, 0xFFFF_FFFF),
            (true, false) => (0, 0, 0),
            (false, true) => (crc, 0xFFFF_FFFF, 0xFFFF_FFFF),
            (false, false) => (crc, csize as u32, usize_ as u32),
        };
        le32(&mut out, lcrc);
        le32(&mut out, lc);
        le32(&mut out, lu);
        le16(&mut out, m.name.len() as u16);
        le16(&mut out, if m.zip64_local { 20 } else { 0 });
        out.extend_from_slice(m.name.as_bytes());
        if m.zip64_local {
            le16(&mut out, 1);
            le16(&mut out, 16);
            let (u, c) = if m.descriptor {
                (0, 0)
            } else {
                (usize_, csize)
            };
            le64(&mut out, u);
            le64(&mut out, c);
        }
        out.extend_from_slice(&body);
        if m.descriptor {
            le32(&mut out, 0x0807_4b50);
            le32(&mut out, crc);
            if m.zip64_local {
                le64(&mut out, csize);
                le64(&mut out, usize_);
            } else {
                le32(&mut out, csize as u32);
                le32(&mut out, usize_ as u32);
            }
        }
        // Central entry.
        layout.centrals.push(central.len() as u64);
        le32(&mut central, 0x0201_4b50);
        le16(&mut central, 0x0314); // made by Unix, 2.0
        le16(&mut central, if m.zip64_local { 45 } else { 20 });
        le16(&mut central, flags);
        le16(&mut central, method);
        le16(&mut central, 0);
        le16(&mut central, 0x21);
        le32(&mut central, crc);
        le32(&mut central, csize as u32);
        le32(&mut central, usize_ as u32);
        le16(&mut central, m.name.len() as u16);
        le16(&mut central, 0); // extra
        le16(&mut central, 0); // comment
        le16(&mut central, 0); // disk
        le16(&mut central, 0); // internal attributes
        le32(&mut central, 0o600 << 16);
        le32(&mut central, local_at as u32);
        central.extend_from_slice(m.name.as_bytes());
    }
    layout.dir_offset = out.len() as u64;
    layout.dir_size = central.len() as u64;
    for c in &mut layout.centrals {
        *c += layout.dir_offset;
    }
    out.extend_from_slice(&central);
    layout.eocd = out.len() as u64;
    eocd(
        &mut out,
        members.len() as u64,
        layout.dir_size,
        layout.dir_offset,
    );
    (out, layout)
}

/// Appends an end-of-central-directory record (no comment).
pub fn eocd(out: &mut Vec<u8>, entries: u64, size: u64, offset: u64) {
    le32(out, 0x0605_4b50);
    le16(out, 0);
    le16(out, 0);
    le16(out, entries.min(0xFFFF) as u16);
    le16(out, entries.min(0xFFFF) as u16);
    le32(out, size.min(0xFFFF_FFFF) as u32);
    le32(out, offset.min(0xFFFF_FFFF) as u32);
    le16(out, 0);
}

/// Appends a zip64 end-of-central-directory record and its locator.
pub fn zip64_eocd(out: &mut Vec<u8>, at: u64, entries: u64, size: u64, offset: u64) {
    le32(out, 0x0606_4b50);
    le64(out, 44);
    le16(out, 45);
    le16(out, 45);
    le32(out, 0);
    le32(out, 0);
    le64(out, entries);
    le64(out, entries);
    le64(out, size);
    le64(out, offset);
    zip64_locator(out, at);
}

/// Appends a zip64 end-of-central-directory locator pointing at `at`.
pub fn zip64_locator(out: &mut Vec<u8>, at: u64) {
    le32(out, 0x0706_4b50);
    le32(out, 0);
    le64(out, at);
    le32(out, 1);
}

/// Overwrites a little-endian u16 / u32 at `at`.
pub fn put16(buf: &mut [u8], at: u64, x: u16) {
    buf[at as usize..at as usize + 2].copy_from_slice(&x.to_le_bytes());
}

pub fn put32(buf: &mut [u8], at: u64, x: u32) {
    buf[at as usize..at as usize + 4].copy_from_slice(&x.to_le_bytes());
}
