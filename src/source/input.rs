//! Opening an input: a file, standard input or an object's stream (which
//! of them is [`super::open`]'s to say, from the input's location),
//! recognised by its first bytes, unwrapped if compressed, spooled to a
//! temp file when its format needs random access that the input cannot give.
//!
//! Layer: source, near the top of it: may import every source, detection,
//! the spool, the header and index layers and below. No source imports this.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt, BufReader};

use super::detect::{detect, hex_preview, Codec, Format, FILE_SNIFF_LEN, SNIFF_LEN};
use super::gguf::GgufSource;
use super::npy::NpySource;
use super::npz::{zip::read_directory, NpzSource};
use super::pytorch::{self, PyTorchSource};
use super::raw::{RawSource, RawSpec};
use super::safetensors::SafetensorsSource;
use super::spool::spool;
use super::{Source, SourceOptions, TensorReader};
use crate::header::{check_file_len, check_prefix, parse_header_json, Rules};
use crate::index::is_index_path;
use crate::{Error, ErrorKind, HeaderError, PyTorchError, Result};

/// How a run tells the user things that are not errors ("spooling ...").
pub(crate) type Notice<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// Opens standard input (`-`) as a source of tensors.
pub(crate) async fn open_stdin(
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let input = "-";
    let stdin: TensorReader<'static> = Box::pin(tokio::io::stdin());
    if let Some(spec) = &options.raw {
        if spec.tensors.iter().any(|t| t.name.is_empty()) {
            return Err(Error::new(ErrorKind::NameNeeded(
                "a dump from standard input",
            )));
        }
        return open_raw_stream(stdin, input, spec, options, notice).await;
    }
    open_stream(stdin, input, None, options, notice, 0).await
}

/// Opens the local file `path` (any format, an index too) as a source of
/// tensors.
pub(crate) async fn open_file(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let input = path.display().to_string();
    if is_index_path(path) {
        return Ok(Box::new(SafetensorsSource::open(path)?));
    }
    if pytorch::is_index_path(path) {
        let src = PyTorchSource::open_index(path, options)?;
        return Ok(told_skipped(src, notice));
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
    let mut first = [0u8; FILE_SNIFF_LEN];
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
        Format::Zip | Format::TorchLegacy | Format::Tar => {
            open_archive(file, len, &input, options, notice)
        }
        Format::Safetensors => Ok(Box::new(SafetensorsSource::from_file(file, len, &input)?)),
        Format::Gguf => open_gguf(file, len, &input, options, notice),
        Format::Compressed(codec) => {
            let raw: TensorReader<'static> = Box::pin(tokio::fs::File::from_std(file));
            let decoded = decoder(codec, raw).map_err(|e| e.with_input(&input))?;
            open_stream(decoded, &input, stem.ok(), options, notice, 1).await
        }
        Format::Unknown => Err(unknown(&first[..got]).with_input(&input)),
    }
}

/// A zip (an .npz or a PyTorch checkpoint, told apart by its members), a
/// legacy PyTorch checkpoint, or PyTorch's refused tar format.
fn open_archive(
    file: File,
    len: u64,
    input: &str,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let first = {
        let mut first = [0u8; FILE_SNIFF_LEN];
        let got = read_prefix(&file, &mut first).map_err(|e| Error::io(e).with_input(input))?;
        detect(&first[..got])
    };
    match first {
        Format::Tar => return Err(tar_refused().with_input(input)),
        Format::Zip => {
            // Read once: its names tell an npz from a PyTorch checkpoint.
            let directory = read_directory(&file, len).map_err(|e| e.with_input(input))?;
            if !pytorch::is_torch_directory(&directory.0) {
                let npz = NpzSource::open_listed(file, len, directory, input, options)?;
                return Ok(Box::new(npz));
            }
        }
        _ => {}
    }
    let src = PyTorchSource::open(file, len, input, options)?;
    Ok(told_skipped(src, notice))
}

/// A GGUF file; says how many array-valued metadata keys `--gguf-metadata` left out.
fn open_gguf(
    file: File,
    len: u64,
    input: &str,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let src = GgufSource::open(file, len, input, options)?;
    // A listing (inspect, validate) shows the metadata; only a conversion leaves keys out.
    if options.gguf_metadata && !options.listing_only && src.skipped_arrays() > 0 {
        notice(&format!(
            "{input}: --gguf-metadata skipped {} array-valued keys (vocabularies, merges, ...)",
            src.skipped_arrays()
        ));
    }
    Ok(Box::new(src))
}

fn tar_refused() -> Error {
    Error::new(ErrorKind::PyTorch(PyTorchError::TarArchive))
}

/// Says how many non-tensor values a checkpoint held that were skipped.
fn told_skipped(src: PyTorchSource, notice: Notice<'_>) -> Box<dyn Source> {
    if src.skipped() > 0 {
        // The first few paths; the JSON report's notes carry the same line.
        let paths = src.skipped_paths();
        let shown: Vec<&str> = paths.iter().take(8).map(String::as_str).collect();
        let more = if src.skipped() > shown.len() {
            ", ..."
        } else {
            ""
        };
        notice(&crate::printable_line(&format!(
            "warning: {}: skipped {} non-tensor values (numbers, strings, hyper-parameters): {}{more}",
            src.input_name(),
            src.skipped(),
            shown.join(", ")
        )));
    }
    Box::new(src)
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
            let decoded = decoder(codec, raw).map_err(|e| e.with_input(input))?;
            open_raw_stream(decoded, input, spec, options, notice).await
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
    let planned = (!spec.allow_trailing)
        .then(|| spec.planned_len())
        .transpose()
        .map_err(|e| e.with_input(input))?;
    let (file, len) = spool(reader, planned)
        .await
        .map_err(|e| e.with_input(input))?;
    Ok(Box::new(RawSource::from_file(file, len, input, spec)?))
}

/// True for what can only be read forward: pipes, FIFOs, sockets, devices.
fn is_stream(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    t.is_fifo() || t.is_socket() || t.is_char_device()
}

fn read_prefix(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    crate::io_util::fill_with(buf, |rest, at| file.read_at(rest, at as u64))
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
        return Err(Error::new(ErrorKind::NameNeeded(
            "an .npy from standard input",
        )));
    }
    Ok(name.to_string())
}

/// A decoder that accepts concatenated members (pigz, pbzip2, multi-frame
/// zstd) and fails on anything else after the last one. Each codec is a
/// cargo feature (all on by default); a build without one refuses its
/// inputs by name.
#[cfg_attr(
    not(any(feature = "gzip", feature = "zstd", feature = "xz", feature = "bzip2")),
    allow(unreachable_code, unused_variables)
)]
/// The largest window (zstd) or dictionary (xz) a decoder may hold: the
/// most `zstd --long` and `zstd --ultra -22` use, twice `xz -9`'s. A stream
/// declares its window in its header and the decoder fills that much memory
/// as it goes, so without a limit a 78 kB `.xz` declaring 256 MiB held
/// 276 MB resident. gzip's window is 32 KiB and bzip2's blocks 900 kB at
/// most: they need no limit.
pub(crate) const DECODER_WINDOW_MAX: u64 = 128 << 20;

/// What liblzma may take beyond the dictionary: its state and buffers.
const XZ_STATE: u64 = 1 << 20;

fn decoder(codec: Codec, raw: TensorReader<'static>) -> Result<TensorReader<'static>> {
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
            let log = DECODER_WINDOW_MAX.trailing_zeros();
            let limit = [DParameter::window_log_max(log)];
            let mut d = async_compression::tokio::bufread::ZstdDecoder::with_params(buf, &limit);
            d.multiple_members(true);
            Box::pin(d)
        }
        #[cfg(feature = "xz")]
        Codec::Xz => {
            let limit = DECODER_WINDOW_MAX + XZ_STATE;
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
    }))
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
                _ if over_window_limit(&e) => format!(
                    "the stream's window is over {} MiB, the most a decoder may hold: refused \
                     (xz -9 and zstd --long fit)",
                    DECODER_WINDOW_MAX >> 20
                ),
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

/// A decoder's refusal of a window over [`DECODER_WINDOW_MAX`]: liblzma's
/// and zstd's own words (a test pins them, so an update that rewords them
/// fails it).
fn over_window_limit(e: &std::io::Error) -> bool {
    let text = e.to_string();
    text == "memory limit reached" || text == "Frame requires too much memory for decoding"
}

/// Reads up to [`SNIFF_LEN`] bytes and gives back a reader that still
/// yields them.
async fn sniff(mut r: TensorReader<'static>) -> Result<(Vec<u8>, TensorReader<'static>)> {
    let mut first = vec![0u8; SNIFF_LEN];
    let got = crate::io_util::fill_async(&mut r, &mut first).await?;
    first.truncate(got);
    let replay = std::io::Cursor::new(first.clone());
    Ok((first, Box::pin(replay.chain(r))))
}

/// Opens a forward-only input read from `reader` (an object streamed
/// whole) exactly as standard input is opened: detected, decompressed,
/// spooled when its format needs seeking. `stem` names a lone .npy array.
#[cfg(feature = "object-store")]
pub(crate) async fn open_reader(
    reader: TensorReader<'static>,
    input: &str,
    stem: Option<String>,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    if let Some(spec) = &options.raw {
        let spec = named_spec(spec, Path::new(input));
        return open_raw_stream(reader, input, &spec, options, notice).await;
    }
    open_stream(reader, input, stem, options, notice, 0).await
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
                    decoder(codec, reader).map_err(on_input)?,
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
                        return Err(on_input(Error::new(ErrorKind::NameNeeded(
                            "an .npy from standard input",
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
            Format::Zip | Format::TorchLegacy => {
                notice(&format!(
                    "{input}: an archive (.npz or PyTorch checkpoint) needs random access; spooling it to a temporary file"
                ));
                // An archive plans nothing before its end: spooled whole.
                let (file, len) = spool(reader, None).await.map_err(on_input)?;
                open_archive(file, len, input, options, notice)
            }
            Format::Tar => Err(on_input(tar_refused())),
            Format::Gguf => {
                notice(&format!(
                    "{input}: a GGUF file needs random access; spooling it to a temporary file"
                ));
                let (file, len) = spool(reader, None).await.map_err(on_input)?;
                open_gguf(file, len, input, options, notice)
            }
            Format::Safetensors if options.listing_only => {
                let (_, json, _) = stream_header(reader).await.map_err(on_input)?;
                let header = parse_header_json(&json, Rules::SOURCE).map_err(on_input)?;
                // No data is read: an empty file stands for it.
                let src = SafetensorsSource::from_data(tempfile::tempfile()?, header, input);
                Ok(Box::new(src) as Box<dyn Source>)
            }
            Format::Safetensors => {
                notice(&format!(
                    "{input}: not seekable; spooling it to a temporary file"
                ));
                let src = spool_safetensors(reader, input).await.map_err(on_input)?;
                Ok(Box::new(src) as Box<dyn Source>)
            }
            Format::Compressed(_) | Format::Unknown => Err(on_input(unknown(&first))),
        }
    })
}

/// Spools a safetensors stream: its header first, which plans the file's
/// length; then at most that many bytes (plus one, to see there are more).
async fn spool_safetensors(reader: TensorReader<'_>, input: &str) -> Result<SafetensorsSource> {
    let (prefix, json, reader) = stream_header(reader).await?;
    let header = parse_header_json(&json, Rules::SOURCE)?;
    let planned = header.file_len();
    let whole = std::io::Cursor::new(&prefix[..])
        .chain(std::io::Cursor::new(&json[..]))
        .chain(reader);
    let (data, len) = spool(Box::pin(whole), Some(planned)).await?;
    check_file_len(&header, len)?;
    drop(json);
    Ok(SafetensorsSource::from_data(data, header, input))
}

/// Reads a safetensors stream's length prefix and header JSON, no further.
async fn stream_header(
    mut reader: TensorReader<'_>,
) -> Result<([u8; 8], Vec<u8>, TensorReader<'_>)> {
    let eof_at = |at: u64| {
        move |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::new(HeaderError::FileTooShort { len: at })
            } else {
                Error::io(e)
            }
        }
    };
    let mut prefix = [0u8; 8];
    reader.read_exact(&mut prefix).await.map_err(eof_at(0))?;
    // The limit is checked before anything is allocated on the claim.
    let n = check_prefix(prefix, u64::MAX)?;
    let mut json = Vec::new();
    (&mut reader).take(n).read_to_end(&mut json).await?;
    if (json.len() as u64) < n {
        let available = json.len() as u64;
        return Err(Error::new(HeaderError::HeaderPastEnd { len: n, available }).at_offset(0));
    }
    Ok((prefix, json, reader))
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
        let e = decoder(Codec::Bzip2, raw).err().expect("bzip2 is off");
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
        let mut d = decoder(Codec::Gzip, raw).expect("gzip is on");
        let mut out = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(tokio::io::AsyncReadExt::read_to_end(&mut d, &mut out))
            .unwrap();
        assert!(out.is_empty());
    }
}
