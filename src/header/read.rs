//! I/O drivers: fetch a file's prefix and header bytes (never its data) and
//! hand them to the pure parser.

use std::io::Read;
use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{check_prefix, parse_header, Header, Rules};
use crate::{Error, ErrorKind, Result};

/// Reads and validates the header of a file of `file_len` bytes from `r`,
/// positioned at the file's start. Reads exactly `8 + N` bytes.
pub fn read_header<R: Read>(r: &mut R, file_len: u64, rules: Rules) -> Result<Header> {
    let prefix = read_prefix(file_len, |buf| r.read_exact(buf))?;
    let n = check_prefix(prefix, file_len)?;
    let mut json = vec![0; n as usize];
    r.read_exact(&mut json).map_err(|e| truncated(e, 8))?;
    parse_header(&json, file_len, rules)
}

/// The async twin of [`read_header`].
pub async fn read_header_async<R: AsyncRead + Unpin>(
    r: &mut R,
    file_len: u64,
    rules: Rules,
) -> Result<Header> {
    let mut prefix = [0u8; 8];
    if file_len < 8 {
        return Err(Error::new(ErrorKind::FileTooShort { len: file_len }).at_offset(0));
    }
    r.read_exact(&mut prefix)
        .await
        .map_err(|e| truncated(e, 0))?;
    let n = check_prefix(prefix, file_len)?;
    let mut json = vec![0; n as usize];
    r.read_exact(&mut json).await.map_err(|e| truncated(e, 8))?;
    parse_header(&json, file_len, rules)
}

/// Opens `path` and validates its header; the error names the path.
///
/// ```no_run
/// use safetensors_stream::header::{read::read_file_header, Rules};
///
/// let header = read_file_header("model.safetensors".as_ref(), Rules::STRICT)?;
/// println!("{} tensors, {} data bytes", header.tensors.len(), header.data_len());
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
pub fn read_file_header(path: &Path, rules: Rules) -> Result<Header> {
    let inner = || -> Result<Header> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        read_header(
            &mut std::io::BufReader::with_capacity(64 * 1024, &mut f),
            len,
            rules,
        )
    };
    inner().map_err(|e| e.with_input(path.display()))
}

fn read_prefix(
    file_len: u64,
    read_exact: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
) -> Result<[u8; 8]> {
    if file_len < 8 {
        return Err(Error::new(ErrorKind::FileTooShort { len: file_len }).at_offset(0));
    }
    let mut prefix = [0u8; 8];
    read_exact(&mut prefix).map_err(|e| truncated(e, 0))?;
    Ok(prefix)
}

/// A file that shrank under us reads short: say where.
fn truncated(e: std::io::Error, at: u64) -> Error {
    Error::io(e).at_offset(at)
}
