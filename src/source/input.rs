//! Opening an input from its [`Location`]: the one place a location's kind
//! is dispatched on. A file (or the checkpoint a folder stands for),
//! standard input and an object streamed whole are recognised by the
//! format table (by path, by the options, by its first bytes), unwrapped if
//! compressed, and opened by its format's row, from the file or, for what
//! can only be read forward, from the stream (which the row may spool to a
//! temp file); a safetensors object goes to its ranged source
//! ([`super::object`]). What comes back reports every file or object it
//! read ([`Source::opened`]): the location opened, which travels into the
//! source with its input ([`super::format::FileInput::origin`]), and what
//! the source read beyond it (an index's shards).
//!
//! Layer: source, near the top of it: may import the table, detection, the
//! codecs, the header and index layers and below. No source imports this.

use std::fs::File;
use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt;

pub(crate) use super::format::Notice;

use super::codec::{decoder, Codec};
use super::detect::{say_what_it_is, FILE_SNIFF_LEN, SNIFF_LEN};
use super::format::{FileInput, FormatRow, PathInput, Stream, StreamInput, Unwrap};
use super::table::{Table, FORMATS, WRAPS};
use super::{Source, SourceOptions, TensorReader};
use crate::limits::Limit;
use crate::location::{Location, Opened};
use crate::{Error, ErrorKind, Note, Result};

/// Opens `path` (`-` for standard input, an object URL, a folder for the
/// checkpoint in it) as a source of tensors, as a conversion opens it:
/// quantized weights are read as the options ask.
pub async fn open_input(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let mut opened = open_inputs(&[path.to_path_buf()], options, notice).await?;
    let one = opened.pop().filter(|_| opened.is_empty());
    one.ok_or_else(|| Error::new(ErrorKind::Usage("one input opened as several".into())))
}

/// Opens every input at `paths` (files of any supported kind, folders for
/// the checkpoint in them, object URLs, or `-`), each parsed once into the
/// [`Location`] it names: [`open_locations`].
pub async fn open_inputs(
    paths: &[PathBuf],
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Vec<Box<dyn Source>>> {
    open_locations(&Location::parse_all(paths)?, options, notice).await
}

/// Opens every input at `locations`, reading headers only; then applies
/// the table's wraps to them all (quantized weights, whose scales may lie
/// in any input). Each source reports the files and objects it read
/// ([`Source::opened`]).
pub async fn open_locations(
    locations: &[Location],
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Vec<Box<dyn Source>>> {
    let mut sources = Vec::with_capacity(locations.len());
    for location in locations {
        sources.push(open_location(location, options, notice).await?);
    }
    WRAPS
        .iter()
        .try_fold(sources, |sources, wrap| wrap(sources, options, notice))
}

/// Opens `location` as a source of tensors, reading headers only (and
/// no wrap: [`open_locations`] applies them).
pub async fn open_location(
    location: &Location,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let source = open_location_unchecked(location, options, notice).await?;
    // Every format's listing, counted in one place (formats that know
    // their count early refuse it before listing).
    let listed = source.tensors().len() as u64;
    if listed > options.limits.get(Limit::TensorCount) {
        let what = format!("it lists {listed} tensors");
        return Err(options
            .limits
            .refuse(Limit::TensorCount, what)
            .with_input(location));
    }
    Ok(source)
}

async fn open_location_unchecked(
    location: &Location,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    match location {
        Location::Stdio => {
            let stream = StreamInput {
                reader: Box::pin(tokio::io::stdin()),
                path: None,
                input: "-",
                name: None,
                options,
                notice,
                origin: Some(Opened::stdin()),
            };
            open_stream(FORMATS, stream, 0).await
        }
        Location::File(path) => open_file(path, options, notice).await,
        Location::Folder(path) => {
            // A folder a format reads as a whole (a distributed
            // checkpoint) is its own input; else the one checkpoint in it.
            // It reports the files it read; the folder has no version.
            let mut folder = super::resolve_folder(path)?;
            let Some(opened) = folder.file.take() else {
                return open_path(FORMATS, path, None, options, notice).await;
            };
            let file = &folder.path;
            match crate::folder::passed_over_notice(path, &folder) {
                Some(said) => notice(&Note::Info(said)),
                None => {
                    let (dir, file_shown) = (path.display(), file.display());
                    notice(&Note::Info(format!("{dir}: reading {file_shown}")));
                }
            }
            if FORMATS.by_path(file).is_some() {
                // An index: its row opens it, and its shards, as regular files.
                return open_file(file, options, notice).await;
            }
            // The handle the resolution checked: a file swapped in since is not read.
            let origin = Some(Opened::open_file(file, &opened));
            open_opened(FORMATS, file, opened, origin, options, notice).await
        }
        #[cfg(feature = "object-store")]
        Location::Object(url) => {
            use super::object::{open_object, ObjectInput};
            match open_object(url, options).await? {
                ObjectInput::Ranged(source) => Ok(source),
                ObjectInput::Whole {
                    reader,
                    stem,
                    size,
                    etag,
                } => {
                    // Opened exactly as standard input is: detected,
                    // decompressed, spooled when its format needs seeking;
                    // a raw dump is named after the object's own name.
                    let stream = StreamInput {
                        reader,
                        path: Some(Path::new(url.name())),
                        input: url.as_str(),
                        name: stem,
                        options,
                        notice,
                        origin: Some(Opened::object(url, size, etag)),
                    };
                    open_stream(FORMATS, stream, 0).await
                }
            }
        }
    }
}

/// A local file, of any format (an index too).
async fn open_file(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let origin = Some(Opened::file(path));
    open_path(FORMATS, path, origin, options, notice).await
}

/// A local path, opened by its format's row in `table`.
pub(crate) async fn open_path(
    table: Table,
    path: &Path,
    origin: Option<Opened>,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let input = path.display().to_string();
    if let Some(row) = table.by_path(path) {
        let explain = say_what_it_is;
        return (row.open)(PathInput {
            path,
            options,
            notice,
            explain,
            origin,
        });
    }
    let on_input = |e: std::io::Error| Error::io(e).with_input(&input);
    // Opening a FIFO blocks until a writer comes: off the runtime's threads,
    // so that a signal still ends the run.
    let owned = path.to_path_buf();
    let file = tokio::task::spawn_blocking(move || File::open(owned))
        .await
        .map_err(|e| on_input(std::io::Error::other(e)))?
        .map_err(on_input)?;
    open_opened(table, path, file, origin, options, notice).await
}

/// `file`, open at `path`, by the format its content (or the options) says.
async fn open_opened(
    table: Table,
    path: &Path,
    file: File,
    origin: Option<Opened>,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let input = path.display().to_string();
    let on_input = |e: std::io::Error| Error::io(e).with_input(&input);
    let meta = file.metadata().map_err(on_input)?;
    let at = FileInput {
        file,
        len: meta.len(),
        path: Some(path),
        input: &input,
        name: tensor_name(path, options),
        options,
        notice,
        origin,
    };
    if is_stream(&meta) {
        // A pipe, FIFO, socket or character device (`convert <(zcat x.npz)`):
        // positional reads fail on it, so it is read forward like stdin.
        return open_stream(table, at.read_forward(), 0).await;
    }
    let mut first = [0u8; FILE_SNIFF_LEN];
    let got = crate::io_util::fill_at(&at.file, &mut first, 0).map_err(on_input)?;
    let first = &first[..got];
    let asked = table.asked(options);
    let named = |c: Codec| {
        let ext = |e: &str| path.extension().is_some_and(|x| x == e);
        ext(c.extension()) || (c == Codec::Zstd && ext("zstd"))
    };
    let unwrap = asked.map_or(Unwrap::ByMagic, |row| row.unwrap);
    let codec = Codec::recognise(first).filter(|&c| unwrap == Unwrap::ByMagic || named(c));
    if let Some(codec) = codec {
        let mut stream = at.read_forward();
        stream.reader =
            decoder(codec, stream.reader, &options.limits).map_err(|e| e.with_input(&input))?;
        return open_stream(table, stream, 1).await;
    }
    let Some(row) = asked.or_else(|| table.by_content(first)) else {
        return Err(unknown(first).with_input(&input));
    };
    (row.file)(at)
}

/// True for what can only be read forward: pipes, FIFOs, sockets, devices.
fn is_stream(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    t.is_fifo() || t.is_socket() || t.is_char_device()
}

/// No format claims `first`: a broken download said for what it is (an
/// LFS pointer, a web page, nothing), else the raw-dump hint.
fn unknown(first: &[u8]) -> Error {
    match super::download::broken_download(first) {
        Some(what) => Error::new(ErrorKind::BrokenDownload(what)),
        None => Error::new(ErrorKind::UnknownFormat(super::download::first_bytes(
            first,
        ))),
    }
}

/// The tensor name of a single-array input: `--name`, or the file name
/// without `.npy` and any compression suffix (`layer.0.npy.gz` -> `layer.0`);
/// `None` when that leaves nothing.
fn tensor_name(path: &Path, options: &SourceOptions) -> Option<String> {
    if let Some(n) = &options.name {
        return Some(n.clone());
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
    (!name.is_empty()).then(|| name.to_string())
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

/// Opens a forward-only input by its format's row: as it comes, or
/// spooled to a temp file first; unwrapped first if compressed (twice at
/// most: a `.tar.gz` of a `.gz` is not unwrapped forever).
fn open_stream(
    table: Table,
    stream: StreamInput<'_>,
    depth: u8,
) -> futures::future::BoxFuture<'_, Result<Box<dyn Source>>> {
    Box::pin(async move {
        if let Some(row) = table.asked(stream.options) {
            return open_row_stream(row, stream).await;
        }
        let input = stream.input;
        let on_input = |e: Error| e.with_input(input);
        let (first, reader) = sniff(stream.reader).await.map_err(on_input)?;
        let stream = StreamInput { reader, ..stream };
        match Codec::recognise(&first) {
            Some(codec) if depth < 2 => {
                let reader =
                    decoder(codec, stream.reader, &stream.options.limits).map_err(on_input)?;
                let stream = StreamInput { reader, ..stream };
                return open_stream(table, stream, depth + 1).await;
            }
            Some(_) => return Err(on_input(unknown(&first))),
            None => {}
        }
        match table.by_content(&first) {
            Some(row) => open_row_stream(row, stream).await,
            None => Err(on_input(unknown(&first))),
        }
    })
}

/// Opens a stream by `row`'s way.
async fn open_row_stream(row: &FormatRow, stream: StreamInput<'_>) -> Result<Box<dyn Source>> {
    match row.stream {
        Stream::Read(open) => open(stream).await,
        Stream::Refused(refusal) => Err(refusal().with_input(stream.input)),
        // It plans nothing before its end: spooled whole.
        Stream::Spool(why) => (row.file)(stream.spooled(why, None).await?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::detect::{detect, Format};
    use crate::source::{open_input, MemorySource};
    use crate::{Dtype, Note};

    /// A format unknown to the crate: `TSTF`, then its bytes as one U8 tensor.
    const TEST_ROW: FormatRow = FormatRow {
        magic: Some(|first| first.starts_with(b"TSTF")),
        ..FormatRow::new(
            "test",
            "a test file",
            open_test,
            Stream::Spool("a test file needs random access"),
        )
    };

    fn open_test(o: FileInput<'_>) -> crate::Result<Box<dyn Source>> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; usize::try_from(o.len).unwrap()];
        o.file.read_exact_at(&mut bytes, 0)?;
        let data = bytes.split_off(4);
        let mut src = MemorySource::new(o.input);
        src.push("t", Dtype::U8, [data.len() as u64], data)?;
        Ok(Box::new(src))
    }

    /// Adding a format is adding its row: a table with the test row opens
    /// its files, from a file and (compressed, so read as a stream, and
    /// spooled) from a stream, with nothing else changed; the crate's
    /// table does not know them.
    #[test]
    fn a_row_is_all_a_format_needs() {
        static WITH_TEST: Table = Table(&[&TEST_ROW]);
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("x.tst");
        std::fs::write(&plain, b"TSTFabc").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let spooled = std::sync::Mutex::new(Vec::new());
        let notice = |m: &Note| spooled.lock().unwrap().push(m.to_string());
        let options = SourceOptions::default();
        let open = |table, path| rt.block_on(open_path(table, path, None, &options, &notice));
        let src = open(WITH_TEST, &plain).unwrap();
        assert_eq!(src.tensors()[0].shape, [3]);
        assert_eq!(detect(b"TSTFabc"), Format::Unknown);
        let e = open(FORMATS, &plain).err().unwrap();
        assert_eq!(e.kind().name(), "unknown_format", "{e:?}");
        #[cfg(feature = "gzip")]
        {
            use std::io::Write;
            let gz = dir.path().join("x.tst.gz");
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(b"TSTFabcde").unwrap();
            std::fs::write(&gz, enc.finish().unwrap()).unwrap();
            let src = open(WITH_TEST, &gz).unwrap();
            assert_eq!(src.tensors()[0].shape, [5]);
            let said = spooled.lock().unwrap().clone();
            let words = format!(
                "{}: a test file needs random access; spooling it to a temporary file",
                gz.display()
            );
            assert_eq!(said, [words]);
        }
    }

    /// A folder's model file is read through the handle its resolution
    /// opened and checked: a file renamed over it after the check (here
    /// while the notice saying which file is read is told) is not read.
    #[test]
    fn a_folder_input_reads_the_file_its_resolution_opened() {
        let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference");
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.safetensors");
        std::fs::copy(reference.join("dtype_u8.safetensors"), &model).unwrap();
        let other = tempfile::tempdir().unwrap();
        let swap = other.path().join("swap");
        std::fs::copy(reference.join("dtype_i8.safetensors"), &swap).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dtypes = |path: &Path, notice: Notice<'_>| {
            let src = rt.block_on(open_input(path, &SourceOptions::default(), notice));
            let src = src.unwrap();
            src.tensors().iter().map(|t| t.dtype).collect::<Vec<_>>()
        };
        let swapped = dtypes(&swap, &|_| {});
        let checked = dtypes(&model, &|_| {});
        assert_ne!(swapped, checked);
        let swap_now = |_: &Note| {
            let _ = std::fs::rename(&swap, &model);
        };
        assert_eq!(dtypes(dir.path(), &swap_now), checked);
        assert!(!swap.exists(), "the swap happened");
    }

    /// `open_input` lists a quantized checkpoint as a conversion writes
    /// it: dequantized weights, no scales or zeros.
    #[test]
    fn open_input_lists_quantized_weights_as_convert_writes_them() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/quantized/awq");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let said = std::sync::Mutex::new(Vec::new());
        let notice = |m: &Note| said.lock().unwrap().push(m.to_string());
        let listed = |options: &SourceOptions, path: &Path| {
            let src = rt.block_on(open_input(path, options, &notice)).unwrap();
            let mut all: Vec<_> = src
                .tensors()
                .iter()
                .map(|t| (t.name.clone(), t.dtype, t.shape.clone()))
                .collect();
            all.sort();
            all
        };
        let to_bf16 = SourceOptions::default().dequantize(Some(Dtype::BF16));
        let written = listed(
            &SourceOptions::default(),
            &dir.join("expected-BF16.safetensors"),
        );
        let model = dir.join("model.safetensors");
        assert_eq!(listed(&to_bf16, &model), written);
        let as_stored = listed(&SourceOptions::default(), &model);
        assert!(
            as_stored.iter().any(|(n, ..)| n.ends_with("qzeros")),
            "{as_stored:?}"
        );
        let said = said.lock().unwrap().clone();
        assert!(
            said.iter()
                .any(|m| m.contains("quantized weights (awq) copied as they are")),
            "{said:?}"
        );
    }
}
