//! Opening an input: a path or standard input, recognised by its first
//! bytes, unwrapped if compressed, spooled to a temp file when its format
//! needs random access that the input cannot give.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use async_compression::tokio::bufread::{BzDecoder, GzipDecoder, XzDecoder, ZstdDecoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

use super::detect::{detect, hex_preview, Codec, Format, SNIFF_LEN};
use super::npy::NpySource;
use super::npz::NpzSource;
use super::raw::{RawSource, RawSpec};
use super::safetensors::SafetensorsSource;
use super::{Source, SourceOptions, TensorReader};
use crate::index::is_index_path;
use crate::{Error, ErrorKind, Result};

/// How a run tells the user things that are not errors ("spooling ...").
pub type Notice<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// Opens `path` (`-` for standard input) as a source of tensors.
pub async fn open_input(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let input = path.display().to_string();
    if path.as_os_str() == "-" {
        let stdin: TensorReader<'static> = Box::pin(tokio::io::stdin());
        if let Some(spec) = &options.raw {
            if spec.tensors.iter().any(|t| t.name.is_empty()) {
                return Err(Error::new(ErrorKind::Usage(
                    "a dump from standard input needs --name".into(),
                )));
            }
            return open_raw_stream(stdin, &input, spec, options, notice).await;
        }
        return open_stream(stdin, &input, None, options, notice, 0).await;
    }
    if is_index_path(path) {
        return Ok(Box::new(SafetensorsSource::open(path)?));
    }
    let on_input = |e: std::io::Error| Error::io(e).with_input(&input);
    // Opening a FIFO blocks until a writer comes: off the runtime's threads,
    // so that a signal still ends the run.
    let owned = path.to_path_buf();
    let file = tokio::task::spawn_blocking(move || File::open(owned))
        .await
        .map_err(|e| on_input(std::io::Error::other(e)))?
        .map_err(on_input)?;
    let meta = file.metadata().map_err(on_input)?;
    if is_stream(&meta) {
        // A pipe, FIFO, socket or character device (`convert <(zcat x.npz)`):
        // positional reads fail on it, so it is read forward like stdin.
        let reader: TensorReader<'static> = Box::pin(tokio::fs::File::from_std(file));
        if let Some(spec) = &options.raw {
            let spec = named_spec(spec, path);
            return open_raw_stream(reader, &input, &spec, options, notice).await;
        }
        let stem = tensor_name(path, options).ok();
        return open_stream(reader, &input, stem, options, notice, 0).await;
    }
    let len = meta.len();
    let mut first = [0u8; SNIFF_LEN];
    let got = read_prefix(&file, &mut first).map_err(on_input)?;
    let stem = tensor_name(path, options);
    if let Some(spec) = &options.raw {
        let spec = named_spec(spec, path);
        return open_raw_file(
            file,
            len,
            path,
            &input,
            &first[..got],
            &spec,
            options,
            notice,
        )
        .await;
    }
    match detect(&first[..got]) {
        Format::Npy => Ok(Box::new(NpySource::from_file(
            file,
            0,
            len,
            &input,
            stem?,
            options.npy_void_as,
        )?)),
        Format::Zip => Ok(Box::new(NpzSource::open(file, len, &input, options)?)),
        Format::Safetensors => Ok(Box::new(SafetensorsSource::from_file(file, len, &input)?)),
        Format::Compressed(codec) => {
            let raw: TensorReader<'static> = Box::pin(tokio::fs::File::from_std(file));
            let decoded = decoder(codec, raw);
            open_stream(decoded, &input, stem.ok(), options, notice, 1).await
        }
        Format::Unknown => Err(unknown(&first[..got]).with_input(&input)),
    }
}

/// A single-tensor spec with no name takes the dump's file name, less its
/// extensions (`dump.bin.gz` -> `dump`).
fn named_spec(spec: &RawSpec, path: &Path) -> RawSpec {
    let mut spec = spec.clone();
    if let [t] = spec.tensors.as_mut_slice() {
        if t.name.is_empty() {
            let file = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            t.name = file.split('.').next().unwrap_or_default().to_string();
        }
    }
    spec
}

/// A raw dump: unwrapped only when its name says it is compressed (raw
/// bytes may begin with anything, a gzip magic included).
#[allow(clippy::too_many_arguments)]
async fn open_raw_file(
    file: File,
    len: u64,
    path: &Path,
    input: &str,
    first: &[u8],
    spec: &RawSpec,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let named = |ext: &str| path.extension().is_some_and(|e| e == ext);
    let compressed = match detect(first) {
        Format::Compressed(c) if named(c.extension()) || (c == Codec::Zstd && named("zstd")) => {
            Some(c)
        }
        _ => None,
    };
    match compressed {
        None => Ok(Box::new(RawSource::from_file(file, len, input, spec)?)),
        Some(codec) => {
            let raw: TensorReader<'static> = Box::pin(tokio::fs::File::from_std(file));
            open_raw_stream(decoder(codec, raw), input, spec, options, notice).await
        }
    }
}

/// One tensor streams in one pass; several need random access: spool.
async fn open_raw_stream(
    reader: TensorReader<'static>,
    input: &str,
    spec: &RawSpec,
    _options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    if spec.tensors.len() == 1 {
        return Ok(Box::new(RawSource::from_stream(reader, input, spec)?));
    }
    notice(&format!(
        "{input}: a multi-tensor dump needs random access; spooling it to a temporary file"
    ));
    let (file, len) = spool(reader).await.map_err(|e| e.with_input(input))?;
    Ok(Box::new(RawSource::from_file(file, len, input, spec)?))
}

/// True for what can only be read forward: pipes, FIFOs, sockets, devices.
fn is_stream(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    t.is_fifo() || t.is_socket() || t.is_char_device()
}

fn read_prefix(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

fn unknown(first: &[u8]) -> Error {
    Error::new(ErrorKind::UnknownFormat(hex_preview(first)))
}

/// The tensor name of a single-array input: `--name`, or the file name
/// without `.npy` and any compression suffix (`layer.0.npy.gz` -> `layer.0`).
fn tensor_name(path: &Path, options: &SourceOptions) -> Result<String> {
    if let Some(n) = &options.name {
        return Ok(n.clone());
    }
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name = file.as_str();
    for suffix in [".gz", ".zst", ".zstd", ".xz", ".bz2"] {
        name = name.strip_suffix(suffix).unwrap_or(name);
    }
    let name = name.strip_suffix(".npy").unwrap_or(name);
    if name.is_empty() || path.as_os_str() == "-" {
        return Err(Error::new(ErrorKind::Usage(
            "an .npy from standard input needs --name".into(),
        )));
    }
    Ok(name.to_string())
}

/// A decoder that accepts concatenated members (pigz, pbzip2, multi-frame
/// zstd) and fails on anything else after the last one.
fn decoder(codec: Codec, raw: TensorReader<'static>) -> TensorReader<'static> {
    let buf = BufReader::with_capacity(256 * 1024, raw);
    let decoded: TensorReader<'static> = match codec {
        Codec::Gzip => {
            let mut d = GzipDecoder::new(buf);
            d.multiple_members(true);
            Box::pin(d)
        }
        Codec::Zstd => {
            let mut d = ZstdDecoder::new(buf);
            d.multiple_members(true);
            Box::pin(d)
        }
        Codec::Xz => {
            let mut d = XzDecoder::new(buf);
            d.multiple_members(true);
            Box::pin(d)
        }
        Codec::Bzip2 => {
            let mut d = BzDecoder::new(buf);
            d.multiple_members(true);
            Box::pin(d)
        }
    };
    Box::pin(DecodeErrors {
        inner: decoded,
        codec,
    })
}

/// Turns a decoder's I/O errors into bad-input errors naming the codec.
struct DecodeErrors {
    inner: TensorReader<'static>,
    codec: Codec,
}

impl AsyncRead for DecodeErrors {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let codec = self.codec;
        self.inner.as_mut().poll_read(cx, buf).map_err(|e| {
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

/// Reads up to [`SNIFF_LEN`] bytes and gives back a reader that still
/// yields them.
async fn sniff(mut r: TensorReader<'static>) -> Result<(Vec<u8>, TensorReader<'static>)> {
    let mut first = vec![0u8; SNIFF_LEN];
    let mut got = 0;
    while got < first.len() {
        match r.read(&mut first[got..]).await? {
            0 => break,
            n => got += n,
        }
    }
    first.truncate(got);
    let replay = std::io::Cursor::new(first.clone());
    Ok((first, Box::pin(replay.chain(r))))
}

/// Opens a forward-only input: an .npy streams as it is read; formats
/// that need random access are spooled to a temp file first.
fn open_stream<'a>(
    reader: TensorReader<'static>,
    input: &'a str,
    stem: Option<String>,
    options: &'a SourceOptions,
    notice: Notice<'a>,
    depth: u8,
) -> futures::future::BoxFuture<'a, Result<Box<dyn Source>>> {
    Box::pin(async move {
        let on_input = |e: Error| e.with_input(input);
        let (first, reader) = sniff(reader).await.map_err(on_input)?;
        match detect(&first) {
            Format::Compressed(codec) if depth < 2 => {
                open_stream(
                    decoder(codec, reader),
                    input,
                    stem,
                    options,
                    notice,
                    depth + 1,
                )
                .await
            }
            Format::Npy => {
                let name = match (&options.name, stem) {
                    (Some(n), _) => n.clone(),
                    (None, Some(s)) => s,
                    (None, None) => {
                        return Err(on_input(Error::new(ErrorKind::Usage(
                            "an .npy from standard input needs --name".into(),
                        ))))
                    }
                };
                let src =
                    NpySource::from_stream_as(reader, input, name, options.npy_void_as).await?;
                if src.needs_random_access() {
                    notice(&format!("{input}: Fortran-order array from a stream; spooling it to a temporary file"));
                    return Ok(Box::new(src.spool().await?) as Box<dyn Source>);
                }
                Ok(Box::new(src) as Box<dyn Source>)
            }
            Format::Zip => {
                notice(&format!(
                    "{input}: an .npz needs random access; spooling it to a temporary file"
                ));
                let (file, len) = spool(reader).await.map_err(on_input)?;
                Ok(Box::new(NpzSource::open(file, len, input, options)?) as Box<dyn Source>)
            }
            Format::Safetensors => {
                notice(&format!(
                    "{input}: not seekable; spooling it to a temporary file"
                ));
                let (file, len) = spool(reader).await.map_err(on_input)?;
                Ok(Box::new(SafetensorsSource::from_file(file, len, input)?) as Box<dyn Source>)
            }
            Format::Compressed(_) | Format::Unknown => Err(on_input(unknown(&first))),
        }
    })
}

/// Copies a stream to an anonymous temp file (disk, never memory).
pub(crate) async fn spool(mut reader: TensorReader<'_>) -> Result<(File, u64)> {
    let tmp = tempfile::tempfile()?;
    let mut out = tokio::fs::File::from_std(tmp.try_clone()?);
    let len = tokio::io::copy(&mut reader, &mut out).await?;
    out.flush().await?;
    Ok((tmp, len))
}
