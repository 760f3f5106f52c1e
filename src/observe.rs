//! Watching bytes go by: progress callbacks and a SHA-256 computed while
//! streaming, as a wrapper around any `AsyncWrite`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tokio::io::AsyncWrite;

use crate::plan::Plan;

/// Told how a conversion advances. Every method has an empty default.
pub trait Progress: Send + Sync {
    /// The plan is made; `total` bytes (headers included) will be written.
    fn start(&self, _plan: &Plan, _total: u64) {}
    /// Tensor `name` of shard `shard` (0-based) of `shards` begins.
    fn tensor(&self, _shard: usize, _shards: usize, _name: &str) {}
    /// `n` more bytes were written.
    fn bytes(&self, _n: u64) {}
    /// Everything is written (not called on failure).
    fn finish(&self) {}
}

/// An `AsyncWrite` that reports what passes through it and can hash it.
pub(crate) struct ObservedWriter<W> {
    inner: W,
    hasher: Option<Sha256>,
    progress: Option<Arc<dyn Progress>>,
}

impl<W> ObservedWriter<W> {
    /// Wraps `inner`; `sha256` turns hashing on.
    pub(crate) fn new(inner: W, sha256: bool, progress: Option<Arc<dyn Progress>>) -> Self {
        ObservedWriter {
            inner,
            hasher: sha256.then(Sha256::new),
            progress,
        }
    }

    /// The hex SHA-256 of everything written, if hashing, and the writer.
    pub(crate) fn into_parts(self) -> (W, Option<String>) {
        let digest = self.hasher.map(|h| hex(&h.finalize()));
        (self.inner, digest)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ObservedWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            // Only what the writer took is hashed and counted.
            if let Some(h) = &mut this.hasher {
                h.update(&buf[..n]);
            }
            if let Some(p) = &this.progress {
                p.bytes(n as u64);
            }
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The SHA-256 of `bytes`, as lowercase hex (a report's checksum).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn hashes_what_was_written() {
        let mut w = ObservedWriter::new(Vec::new(), true, None);
        w.write_all(b"abc").await.unwrap();
        let (bytes, digest) = w.into_parts();
        assert_eq!(bytes, b"abc");
        assert_eq!(
            digest.unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
