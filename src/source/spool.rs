//! Spooling a forward-only stream to an anonymous temp file, for a format
//! that needs random access (an archive, a Fortran-order array, a
//! safetensors file from a pipe).
//!
//! Layer: source, below every source that spools and below the opening of
//! inputs. May import the source facade's types and the error layer.

use std::fs::File;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::TensorReader;
use crate::{Error, ErrorKind, Result};

/// Copies a stream to an anonymous temp file (disk, never memory). With a
/// `planned` length, reading stops one byte past it: a stream that holds
/// more (a compression bomb) is refused without spooling the rest.
pub(crate) async fn spool(
    mut reader: TensorReader<'_>,
    planned: Option<u64>,
) -> Result<(File, u64)> {
    let tmp = tempfile::tempfile()?;
    let mut out = tokio::fs::File::from_std(tmp.try_clone()?);
    let len = match planned {
        None => tokio::io::copy(&mut reader, &mut out).await?,
        Some(p) => tokio::io::copy(&mut (&mut reader).take(p.saturating_add(1)), &mut out).await?,
    };
    if let Some(expected) = planned.filter(|&p| len > p) {
        return Err(Error::new(ErrorKind::StreamTooLong { expected }));
    }
    out.flush().await?;
    Ok((tmp, len))
}
