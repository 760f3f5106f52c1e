//! Raw binary dumps: the bytes of one or more tensors, with dtype, shape and
//! offset given by the user (flags or a JSON manifest).

use std::fs::File;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::format::{FileInput, FormatRow, Stream, StreamInput, Unwrap};
use super::{
    file_range, Access, FileOrStream, FileSpan, Listing, Source, TensorData, TensorReader,
};
use crate::error::Span;
use crate::header::TensorMeta;
use crate::transform::Transform;
use crate::{Dtype, Error, ErrorKind, HeaderError, Result};

/// One tensor in a dump: what it is and where it starts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTensor {
    /// Tensor name.
    #[serde(deserialize_with = "charged_name")]
    pub name: String,
    /// Element type (`"F32"`, or as numpy or torch spell it: `"float32"`).
    #[serde(deserialize_with = "crate::dtype::deserialize_spelled")]
    pub dtype: Dtype,
    /// Shape; `[]` for a scalar.
    #[serde(deserialize_with = "charged_shape")]
    pub shape: Vec<u64>,
    /// Byte offset of its first byte in the dump.
    #[serde(default)]
    pub offset: u64,
}

/// A manifest entry's name, its entry charged to the parse's budget
/// ([`charge_json`](crate::index::charge_json)) as the parse holds it: the
/// entry in the list (twice, while the list moves as it grows) and the
/// name's block (the allocator's 16-byte granules). The source's own copy
/// comes once the parse is over and the text gone.
fn charged_name<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    let name = String::deserialize(d)?;
    let entry = std::mem::size_of::<RawTensor>() as u64;
    crate::index::charge_json(2 * entry + (name.len() as u64).next_multiple_of(16))?;
    Ok(name)
}

/// A manifest entry's shape, each dimension charged as it is read (room
/// for as many again as the list grows).
fn charged_shape<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<u64>, D::Error> {
    struct Dims;
    impl<'de> serde::de::Visitor<'de> for Dims {
        type Value = Vec<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of dimensions")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Vec<u64>, A::Error> {
            let mut dims = Vec::new();
            while let Some(d) = seq.next_element()? {
                crate::index::charge_json(16)?;
                dims.push(d);
            }
            Ok(dims)
        }
    }
    d.deserialize_seq(Dims)
}

/// How to read a dump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawSpec {
    /// The tensors, in any order; their ranges may not overlap.
    pub tensors: Vec<RawTensor>,
    /// The dump is big-endian.
    pub big_endian: bool,
    /// Accept bytes after the last tensor.
    pub allow_trailing: bool,
    /// The manifest file the tensors were read from
    /// ([`from_manifest_file`](Self::from_manifest_file) sets it): read as
    /// much as the dump, so the source reports it among the files it read
    /// ([`Source::opened`]) and no output may replace it.
    pub manifest: Option<std::path::PathBuf>,
}

impl RawSpec {
    /// Parses a manifest: a JSON list of `{"name", "dtype", "shape", "offset"}`.
    ///
    /// ```
    /// use safetensors_stream::source::RawSpec;
    ///
    /// let spec = RawSpec::from_manifest(br#"[{"name": "w", "dtype": "F32", "shape": [2, 2], "offset": 16}]"#)?;
    /// assert_eq!(spec.tensors[0].offset, 16);
    /// # Ok::<(), safetensors_stream::Error>(())
    /// ```
    pub fn from_manifest(json: &[u8]) -> Result<RawSpec> {
        crate::index::start_json_parse(json.len() as u64);
        let tensors: Vec<RawTensor> = serde_json::from_slice(json)
            .map_err(|e| Error::new(ErrorKind::Usage(format!("raw manifest: {e}"))))?;
        Ok(RawSpec {
            tensors,
            ..RawSpec::default()
        })
    }

    /// Reads and parses the manifest file at `path` as a stream (at most
    /// 100 MB, like a header; a file that is not JSON fails at its first bad
    /// byte); errors name the path.
    pub fn from_manifest_file(path: &std::path::Path) -> Result<RawSpec> {
        Self::from_manifest_file_within(path, &crate::Limits::default())
    }

    /// [`from_manifest_file`](Self::from_manifest_file) refusing a
    /// manifest over the caller's `index-bytes` limit.
    pub fn from_manifest_file_within(
        path: &std::path::Path,
        limits: &crate::Limits,
    ) -> Result<RawSpec> {
        let read = |e: serde_json::Error| ErrorKind::Usage(format!("raw manifest: {e}"));
        let tensors: Vec<RawTensor> = crate::index::json_file(path, "raw manifest", limits, read)?;
        Ok(RawSpec {
            tensors,
            manifest: Some(path.to_path_buf()),
            ..RawSpec::default()
        })
    }

    /// The bytes the dump must hold: the end of its last tensor.
    pub fn planned_len(&self) -> Result<u64> {
        place(self).map(|(_, _, end)| end)
    }

    /// Parses a shape flag: `4,256`, or `scalar` / an empty string for 0-d.
    pub fn parse_shape(s: &str) -> Result<Vec<u64>> {
        let s = s.trim();
        if s.is_empty() || s == "scalar" || s == "()" {
            return Ok(Vec::new());
        }
        s.trim_matches(|c| c == '(' || c == ')' || c == '[' || c == ']')
            .split(',')
            .filter(|d| !d.trim().is_empty())
            .map(|d| {
                d.trim().parse::<u64>().map_err(|_| {
                    Error::new(ErrorKind::Usage(format!(
                        "--raw-shape {s:?}: {d:?} is not a dimension"
                    )))
                })
            })
            .collect()
    }
}

/// Where each tensor lies, checked.
#[derive(Debug, Clone)]
struct Placed {
    offset: u64,
    len: u64,
}

/// Sorts by offset, computes lengths, refuses overlaps: the tensors in
/// the dump's order, where each lies, and the end of the last range. Each
/// name and shape is copied once, from the spec into its tensor in the
/// sorted order (the spec stays the caller's): a million entries are held
/// twice, not three or four times.
fn place(spec: &RawSpec) -> Result<(Vec<TensorMeta>, Vec<Placed>, u64)> {
    // Where each tensor lies and its index in the spec, sorted by offset.
    let mut order = Vec::with_capacity(spec.tensors.len());
    for (i, t) in spec.tensors.iter().enumerate() {
        let len = TensorMeta::new(String::new(), t.dtype, t.shape.clone()).byte_len()?;
        if !crate::header::numpy_can_hold(t.dtype, &t.shape) {
            return Err(Error::new(ErrorKind::Usage(format!(
                "tensor {:?}: shape {:?} is too big for numpy and torch (over 2^63-1 bytes, zeros aside)",
                t.name, t.shape
            ))));
        }
        t.offset.checked_add(len).ok_or_else(|| {
            Error::new(ErrorKind::Usage(format!(
                "tensor {:?}: offset plus length overflows",
                t.name
            )))
        })?;
        order.push((t.offset, len, i));
    }
    order.sort_unstable();
    let name = |i: usize| spec.tensors[i].name.clone();
    for w in order.windows(2) {
        let ((qo, ql, qi), (po, pl, pi)) = (w[0], w[1]);
        if po < qo + ql {
            return Err(Error::new(HeaderError::Overlap {
                first: name(qi),
                first_span: Span(qo, qo + ql),
                second: name(pi),
                second_span: Span(po, po + pl),
            }));
        }
    }
    let mut end = 0u64;
    let mut tensors = Vec::with_capacity(order.len());
    let mut placed = Vec::with_capacity(order.len());
    for (offset, len, i) in order {
        end = end.max(offset + len);
        let t = &spec.tensors[i];
        tensors.push(TensorMeta::new(t.name.clone(), t.dtype, t.shape.clone()));
        placed.push(Placed { offset, len });
    }
    Ok((tensors, placed, end))
}

enum Data {
    /// The dump, and how it was when opened.
    File(Arc<File>, super::Stamp),
    /// Forward-only; `pos` is how far it has been read.
    Stream {
        reader: Option<TensorReader<'static>>,
        pos: u64,
    },
}

impl Data {
    fn backing(&self) -> FileOrStream<'_> {
        FileOrStream(match self {
            Data::File(file, opened) => Some((file, opened)),
            Data::Stream { .. } => None,
        })
    }
}

/// A raw dump as a source.
pub struct RawSource {
    /// The location it was opened from, reported first by `opened`.
    origin: Option<crate::location::Opened>,
    /// The manifest its layout was read from, reported after the dump.
    manifest: Option<crate::location::Opened>,
    listing: Listing,
    placed: Vec<Placed>,
    transform: Vec<Transform>,
    allow_trailing: bool,
    data: Data,
}

impl std::fmt::Debug for RawSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSource")
            .field("listing", &self.listing)
            .finish()
    }
}

impl RawSource {
    fn new(spec: &RawSpec, input: &str, data: Data) -> Result<(Self, u64)> {
        let (tensors, placed, end) = place(spec).map_err(|e| e.with_input(input))?;
        let transform = tensors
            .iter()
            .map(|t| Transform::to_little_endian(t.dtype, spec.big_endian))
            .collect();
        let src = RawSource {
            origin: None,
            manifest: spec.manifest.as_deref().map(crate::location::Opened::file),
            listing: Listing {
                input: input.to_string(),
                tensors,
                metadata: None,
            },
            placed,
            transform,
            allow_trailing: spec.allow_trailing,
            data,
        };
        Ok((src, end))
    }

    /// A dump in `file`, `len` bytes long: its size must match the spec
    /// exactly (or leave trailing bytes, if allowed).
    pub fn from_file(file: File, len: u64, input: &str, spec: &RawSpec) -> Result<Self> {
        let opened = super::Stamp::of(&file, len);
        let (src, end) = Self::new(spec, input, Data::File(Arc::new(file), opened))?;
        if len < end || (len > end && !spec.allow_trailing) {
            let e = Error::new(ErrorKind::DataLength {
                expected: end,
                actual: len,
            });
            return Err(e.with_input(input));
        }
        Ok(src)
    }

    /// A one-tensor dump read forward from a stream, in one pass; its
    /// length is checked as it ends. (Several tensors need random access:
    /// spool the stream to a file and use [`RawSource::from_file`].)
    pub fn from_stream(reader: TensorReader<'static>, input: &str, spec: &RawSpec) -> Result<Self> {
        if spec.tensors.len() != 1 {
            let msg = "a streamed dump must hold exactly one tensor; spool it to a file";
            return Err(Error::new(ErrorKind::ReadOnce(msg)).with_input(input));
        }
        let data = Data::Stream {
            reader: Some(reader),
            pos: 0,
        };
        Ok(Self::new(spec, input, data)?.0)
    }
}

/// The raw row of the format table: no magic (a dump may begin with
/// anything); every input is read as one when a layout is given, and
/// unwrapped only when its name, too, says it is compressed.
pub(crate) const ROW: FormatRow = FormatRow {
    asked: Some(|options| options.raw.is_some()),
    unwrap: Unwrap::ByName,
    ..FormatRow::new("raw", "a raw dump", open_file, Stream::Read(open_stream))
};

/// The options' layout, a single unnamed tensor named after the dump's
/// file, less its extensions (`dump.bin.gz` -> `dump`); from standard
/// input, which has no name, every tensor must be named.
/// Borrowed from the options (a million entries are not copied) unless
/// the one tensor takes the file's name.
fn layout<'a>(
    options: &'a super::SourceOptions,
    path: Option<&std::path::Path>,
) -> Result<std::borrow::Cow<'a, RawSpec>> {
    use std::borrow::Cow;
    let mut spec = match &options.raw {
        Some(spec) => Cow::Borrowed(spec),
        None => Cow::Owned(RawSpec::default()),
    };
    let Some(path) = path else {
        if spec.tensors.iter().any(|t| t.name.is_empty()) {
            return Err(Error::new(ErrorKind::NameNeeded(
                "a dump from standard input",
            )));
        }
        return Ok(spec);
    };
    if matches!(spec.tensors.as_slice(), [t] if t.name.is_empty()) {
        if let [t] = spec.to_mut().tensors.as_mut_slice() {
            let file = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            t.name = file.split('.').next().unwrap_or_default().to_string();
        }
    }
    Ok(spec)
}

fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let spec = layout(o.options, o.path)?;
    let mut src = RawSource::from_file(o.file, o.len, o.input, &spec)?;
    src.origin = o.origin;
    Ok(Box::new(src))
}

/// One tensor streams in one pass; several need random access: spooled,
/// at most the bytes the layout plans (unless trailing bytes are allowed).
fn open_stream(o: StreamInput<'_>) -> BoxFuture<'_, Result<Box<dyn Source>>> {
    async move {
        let spec = layout(o.options, o.path)?;
        let input = o.input;
        if spec.tensors.len() == 1 {
            let mut src = RawSource::from_stream(o.reader, input, &spec)?;
            src.origin = o.origin;
            return Ok(Box::new(src) as Box<dyn Source>);
        }
        let planned = (!spec.allow_trailing)
            .then(|| spec.planned_len())
            .transpose()
            .map_err(|e| e.with_input(input))?;
        let f = o
            .spooled("a multi-tensor dump needs random access", planned)
            .await?;
        let mut src = RawSource::from_file(f.file, f.len, input, &spec)?;
        src.origin = f.origin;
        Ok(Box::new(src) as Box<dyn Source>)
    }
    .boxed()
}

impl Source for RawSource {
    /// The dump, then the manifest describing it.
    fn opened(&self) -> Vec<crate::location::Opened> {
        self.origin.iter().chain(&self.manifest).cloned().collect()
    }

    fn listing(&self) -> &Listing {
        &self.listing
    }

    file_or_stream_getters!();

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        let Data::File(file, _) = &self.data else {
            return None;
        };
        let p = &self.placed[k];
        Some(FileSpan {
            file: file.clone(),
            offset: p.offset,
            len: p.len,
            transform: self.transform[k],
            crc: None,
        })
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let p = self.placed[k].clone();
        let transform = self.transform[k];
        let allow_trailing = self.allow_trailing;
        async move {
            let reader: TensorReader<'_> = match &mut self.data {
                Data::File(f, _) => Box::pin(file_range(f, p.offset, p.len).await?),
                Data::Stream { reader, pos } => {
                    let mut r = reader.take().ok_or_else(|| {
                        Error::new(ErrorKind::ReadOnce("a streamed dump is read once"))
                    })?;
                    let gap = p.offset - *pos;
                    let skipped =
                        tokio::io::copy(&mut (&mut r).take(gap), &mut tokio::io::sink()).await?;
                    if skipped < gap {
                        let e = ErrorKind::DataLength {
                            expected: p.offset + p.len,
                            actual: *pos + skipped,
                        };
                        return Err(Error::new(e));
                    }
                    *pos = p.offset + p.len;
                    Box::pin(StreamTail {
                        inner: r.take(p.len),
                        expected: p.offset + p.len,
                        at: p.offset,
                        allow_trailing,
                        extra: None,
                    })
                }
            };
            Ok(TensorData { reader, transform })
        }
        .boxed()
    }
}

/// A streamed dump's one tensor: its bytes, then the end of the stream. Too
/// few or (unless trailing bytes are allowed) too many is the same error, with
/// the same counts of the whole dump, as for a dump in a file; the rest of the
/// stream is read to count it. (The sink reads one byte past the tensor, so
/// trailing bytes are found.)
struct StreamTail {
    inner: tokio::io::Take<TensorReader<'static>>,
    /// The dump's length: the tensor's offset plus its length.
    expected: u64,
    /// Bytes of the dump read so far.
    at: u64,
    allow_trailing: bool,
    /// Once past the tensor: bytes found after it so far.
    extra: Option<u64>,
}

impl tokio::io::AsyncRead for StreamTail {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::{ready, Poll};
        let this = &mut *self;
        if this.extra.is_none() {
            let before = buf.filled().len();
            ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, buf))?;
            let n = (buf.filled().len() - before) as u64;
            this.at += n;
            if n > 0 || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if this.at < this.expected {
                return Poll::Ready(Err(data_length(this.expected, this.at)));
            }
            if this.allow_trailing {
                return Poll::Ready(Ok(()));
            }
            this.extra = Some(0);
        }
        let mut scratch = [0u8; 8192];
        loop {
            let mut rb = tokio::io::ReadBuf::new(&mut scratch);
            ready!(std::pin::Pin::new(this.inner.get_mut()).poll_read(cx, &mut rb))?;
            match rb.filled().len() as u64 {
                0 => break,
                n => *this.extra.get_or_insert(0) += n,
            }
        }
        match this.extra {
            Some(0) | None => Poll::Ready(Ok(())),
            Some(extra) => Poll::Ready(Err(data_length(this.expected, this.expected + extra))),
        }
    }
}

fn data_length(expected: u64, actual: u64) -> std::io::Error {
    Error::new(ErrorKind::DataLength { expected, actual }).into_io()
}
