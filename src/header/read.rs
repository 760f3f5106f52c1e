//! I/O drivers: fetch a file's prefix and header bytes (never its data) and
//! hand them to the pure parser.
//!
//! Owns reading a header from a reader, a path or a stream, and reading a
//! small file whole under the header's cap. May import the header's pure
//! code and the error layer; never a source (what a file that is not
//! safetensors is, is the source layer's question).

use std::io::Read;
use std::path::Path;

use super::{check_file_len, check_prefix, parse_header, parse_header_json, Header, Rules};
use crate::{Error, ErrorKind, HeaderError, Result};

/// Reads and validates the header of a file of `file_len` bytes from `r`,
/// positioned at the file's start. Reads exactly `8 + N` bytes.
pub fn read_header<R: Read>(r: &mut R, file_len: u64, rules: Rules) -> Result<Header> {
    let prefix = read_prefix(file_len, |buf| r.read_exact(buf))?;
    let n = check_prefix(prefix, file_len)?;
    let mut json = vec![0; n as usize];
    r.read_exact(&mut json).map_err(|e| truncated(e, 8))?;
    parse_header(&json, file_len, rules)
}

/// Opens `path` (`-` for standard input; a pipe or device is read as a
/// stream) and validates its header; the error names the path. It does not
/// say what a file that is not safetensors is instead: that takes format
/// detection, a source-level job (`source::read_file_header` does both).
pub(crate) fn read_path_header(path: &Path, rules: Rules) -> Result<Header> {
    let inner = || -> Result<Header> {
        if path.as_os_str() == "-" {
            return read_stream_header(&mut std::io::stdin().lock(), rules);
        }
        let mut f = std::fs::File::open(path)?;
        let meta = f.metadata()?;
        let mut r = std::io::BufReader::with_capacity(64 * 1024, &mut f);
        if !meta.is_file() {
            // A pipe, FIFO or device has no length to check against.
            return read_stream_header(&mut r, rules);
        }
        read_header(&mut r, meta.len(), rules)
    };
    inner().map_err(|e| e.with_input(path.display()))
}

/// Reads and validates a safetensors file from a stream (a pipe): the header,
/// then the data counted (not kept) up to the length the header plans; one
/// byte more is refused without reading further.
pub(crate) fn read_stream_header<R: Read>(r: &mut R, rules: Rules) -> Result<Header> {
    let mut prefix = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match r.read(&mut prefix[got..])? {
            0 => return Err(Error::new(HeaderError::FileTooShort { len: got as u64 }).at_offset(0)),
            n => got += n,
        }
    }
    // The limit is checked before anything is allocated on the claim.
    let n = check_prefix(prefix, u64::MAX)?;
    let mut json = Vec::new();
    (&mut *r).take(n).read_to_end(&mut json)?;
    if (json.len() as u64) < n {
        let available = json.len() as u64;
        return Err(Error::new(HeaderError::HeaderPastEnd { len: n, available }).at_offset(0));
    }
    let header = parse_header_json(&json, rules)?;
    drop(json);
    let data_len = header.data_len();
    let seen = std::io::copy(
        &mut (&mut *r).take(data_len.saturating_add(1)),
        &mut std::io::sink(),
    )?;
    if seen > data_len {
        return Err(Error::new(ErrorKind::StreamTooLong {
            expected: header.file_len(),
        }));
    }
    check_file_len(&header, header.data_start() + seen)?;
    Ok(header)
}

fn read_prefix(
    file_len: u64,
    read_exact: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
) -> Result<[u8; 8]> {
    if file_len < 8 {
        return Err(Error::new(HeaderError::FileTooShort { len: file_len }).at_offset(0));
    }
    let mut prefix = [0u8; 8];
    read_exact(&mut prefix).map_err(|e| truncated(e, 0))?;
    Ok(prefix)
}

/// A file that shrank under us reads short: say where.
fn truncated(e: std::io::Error, at: u64) -> Error {
    Error::io(e).at_offset(at)
}
