//! Compressed inputs: the codecs recognised by their magic, and a decoder
//! for each that bounds its window and names itself in errors.
//!
//! Layer: source, below the formats and the table (any of them may
//! decode); imports the error layer only.

use tokio::io::{AsyncRead, BufReader};

use super::TensorReader;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::limits::{Limit, Limits, RATIO_ALLOWANCE};
use crate::{Error, ErrorKind, Result};

/// The compressions we unwrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// `1f 8b`.
    Gzip,
    /// `28 b5 2f fd`.
    Zstd,
    /// `fd 37 7a 58 5a 00`.
    Xz,
    /// `BZh1`..`BZh9`.
    Bzip2,
}

impl Codec {
    /// The file extension that names it.
    pub fn extension(self) -> &'static str {
        match self {
            Codec::Gzip => "gz",
            Codec::Zstd => "zst",
            Codec::Xz => "xz",
            Codec::Bzip2 => "bz2",
        }
    }

    /// The codec's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Zstd => "zstd",
            Codec::Xz => "xz",
            Codec::Bzip2 => "bzip2",
        }
    }
}

impl Codec {
    /// The codec whose magic `first` begins with, if any.
    pub(crate) fn recognise(first: &[u8]) -> Option<Codec> {
        let starts = |magic: &[u8]| first.starts_with(magic);
        if starts(&[0x1f, 0x8b]) {
            Some(Codec::Gzip)
        } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Codec::Zstd)
        } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Some(Codec::Xz)
        } else if starts(b"BZh") && first.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
            Some(Codec::Bzip2)
        } else {
            None
        }
    }
}

// The largest window (zstd) or dictionary (xz) a decoder may hold is the
// caller's `decoder-window` limit, by default 128 MiB: the most `zstd
// --long` and `zstd --ultra -22` use, twice `xz -9`'s. A stream declares
// its window in its header and the decoder fills that much memory as it
// goes, so without a limit a tiny `.xz` holds what it declares. gzip's
// window is 32 KiB and bzip2's blocks 900 kB at most:
// they need no limit.

/// zstd's window limit as the log2 it takes: `window` rounded down to a
/// power of two, within what zstd accepts (1 KiB to 2 GiB).
#[cfg(feature = "zstd")]
fn zstd_window_log(window: u64) -> u32 {
    (63 - window.max(1).leading_zeros()).clamp(10, 31)
}

/// What liblzma may take beyond the dictionary: its state and buffers.
#[cfg(feature = "xz")]
const XZ_STATE: u64 = 1 << 20;

/// A decoder that accepts concatenated members (pigz, pbzip2, multi-frame
/// zstd) and fails on anything else after the last one. Each codec is a
/// cargo feature (all on by default); a build without one refuses its
/// inputs by name.
#[cfg_attr(
    not(any(feature = "gzip", feature = "zstd", feature = "xz", feature = "bzip2")),
    allow(unreachable_code, unused_variables)
)]
pub(crate) fn decoder(
    codec: Codec,
    raw: TensorReader<'static>,
    limits: &Limits,
) -> Result<TensorReader<'static>> {
    let window = limits.get(Limit::DecoderWindow);
    let consumed = Arc::new(AtomicU64::new(0));
    let raw: TensorReader<'static> = Box::pin(Counted {
        inner: raw,
        count: consumed.clone(),
    });
    let buf = BufReader::with_capacity(256 * 1024, raw);
    let decoded: TensorReader<'static> = match codec {
        #[cfg(feature = "gzip")]
        Codec::Gzip => {
            let mut d = async_compression::tokio::bufread::GzipDecoder::new(buf);
            d.multiple_members(true);
            Box::pin(d)
        }
        #[cfg(feature = "zstd")]
        Codec::Zstd => {
            use async_compression::codecs::zstd::params::DParameter;
            let limit = [DParameter::window_log_max(zstd_window_log(window))];
            let mut d = async_compression::tokio::bufread::ZstdDecoder::with_params(buf, &limit);
            d.multiple_members(true);
            Box::pin(d)
        }
        #[cfg(feature = "xz")]
        Codec::Xz => {
            let limit = window.saturating_add(XZ_STATE);
            let mut d = async_compression::tokio::bufread::XzDecoder::with_mem_limit(buf, limit);
            d.multiple_members(true);
            Box::pin(d)
        }
        #[cfg(feature = "bzip2")]
        Codec::Bzip2 => {
            let mut d = async_compression::tokio::bufread::BzDecoder::new(buf);
            d.multiple_members(true);
            Box::pin(d)
        }
        #[allow(unreachable_patterns)] // every codec enabled: nothing is left
        disabled => {
            drop(buf);
            return Err(Error::new(ErrorKind::CodecDisabled(disabled.name())));
        }
    };
    Ok(Box::pin(DecodeErrors {
        inner: decoded,
        codec,
        limits: *limits,
        consumed,
        produced: 0,
    }))
}

/// The compressed bytes read, counted for the `decompression-ratio` limit.
struct Counted {
    inner: TensorReader<'static>,
    count: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.count.fetch_add(read, Ordering::Relaxed);
        polled
    }
}

/// Turns a decoder's I/O errors into bad-input errors naming the codec.
struct DecodeErrors {
    inner: TensorReader<'static>,
    codec: Codec,
    /// Whose `decoder-window` and `decompression-ratio` a refusal names.
    limits: Limits,
    /// Compressed bytes the decoder has read (its buffer's included: a
    /// ratio counted a little low, never high).
    consumed: Arc<AtomicU64>,
    /// Bytes decoded so far.
    produced: u64,
}

impl AsyncRead for DecodeErrors {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let (codec, limits) = (self.codec, self.limits);
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = polled {
            self.produced += (buf.filled().len() - before) as u64;
            let consumed = self.consumed.load(Ordering::Relaxed);
            let ratio = limits.get(Limit::DecompressionRatio);
            if self.produced > RATIO_ALLOWANCE && self.produced > consumed.saturating_mul(ratio) {
                let what = format!(
                    "the {} stream inflates {consumed} bytes to more than {}",
                    codec.name(),
                    self.produced
                );
                let refused = limits.refuse(Limit::DecompressionRatio, what);
                return std::task::Poll::Ready(Err(refused.into_io()));
            }
        }
        polled.map_err(|e| {
            if e.get_ref().is_some_and(|i| i.is::<Error>())
                || e.kind() != std::io::ErrorKind::InvalidData
                    && e.kind() != std::io::ErrorKind::Other
                    && e.kind() != std::io::ErrorKind::UnexpectedEof
                    // liblzma's "no progress possible" (a truncated xz stream)
                    // and bzip2's equivalent arrive as OutOfMemory.
                    && e.kind() != std::io::ErrorKind::OutOfMemory
            {
                return e;
            }
            if over_window_limit(&e) {
                let what = format!(
                    "the {} stream's window is over the most a decoder may hold \
                     (xz -9 and zstd --long fit the default)",
                    codec.name()
                );
                return limits.refuse(Limit::DecoderWindow, what).into_io();
            }
            let message = match e.kind() {
                std::io::ErrorKind::UnexpectedEof => "compressed stream is truncated".to_string(),
                std::io::ErrorKind::OutOfMemory => {
                    "compressed stream is truncated or corrupt".to_string()
                }
                _ => e.to_string(),
            };
            Error::new(ErrorKind::Decompress {
                codec: codec.name(),
                message,
            })
            .into_io()
        })
    }
}

/// A decoder's refusal of a window over the `decoder-window` limit: liblzma's
/// and zstd's own words (a test pins them, so an update that rewords them
/// fails it).
fn over_window_limit(e: &std::io::Error) -> bool {
    let text = e.to_string();
    text == "memory limit reached" || text == "Frame requires too much memory for decoding"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build without a codec's feature refuses that codec's inputs by
    /// name (CI builds the library tests once without bzip2 to run this).
    #[cfg(not(feature = "bzip2"))]
    #[test]
    fn a_disabled_codec_is_refused_by_name() {
        let raw: TensorReader<'static> = Box::pin(&b"BZh91AY&SY"[..]);
        let e = decoder(Codec::Bzip2, raw, &Limits::default())
            .err()
            .expect("bzip2 is off");
        assert!(
            matches!(e.kind(), ErrorKind::CodecDisabled("bzip2")),
            "{e:?}"
        );
        assert_eq!(e.category(), crate::Category::BadInput);
    }

    #[cfg(feature = "gzip")]
    #[test]
    fn an_enabled_codec_decodes() {
        let raw: TensorReader<'static> = Box::pin(
            &[
                0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ][..],
        );
        let mut d = decoder(Codec::Gzip, raw, &Limits::default()).expect("gzip is on");
        let mut out = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(tokio::io::AsyncReadExt::read_to_end(&mut d, &mut out))
            .unwrap();
        assert!(out.is_empty());
    }
}
