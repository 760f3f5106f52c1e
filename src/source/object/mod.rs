//! An object as an input. A safetensors object is read by ranges: its
//! header by one GET of the first [`FIRST_RANGE`] bytes (and a second only
//! for a larger header), a large tensor by its own streaming GET, small
//! tensors and dequantization's pieces from windows of many tensors read
//! by one GET each (`windows`). Every GET
//! is pinned to the ETag seen when the object was planned, so that an
//! object replaced mid-run is refused, as a local file that changes is.
//! Any other format is handed back as one pinned stream, which the
//! source layer's input opening reads as it reads standard input
//! (decompressed, spooled when its format needs seeking).
//!
//! Layer: source. May import the source facade and detection, the header
//! and index layers, the store client and below; never the opening of
//! inputs (which imports this).

#[cfg(test)]
mod tests;
mod windows;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryStreamExt};
use object_store::{GetOptions, GetRange, GetResult, ObjectStoreExt};

use std::path::Path;

use super::detect::{detect, Format};
use super::span::{ByteSpan, ReadAt};
use super::{Listing, Source, SourceOptions, TensorData, TensorReader};
use crate::error::store::{one_line, StoreError};
use crate::header::read::read_header;
use crate::header::{check_prefix, Header, Metadata, Rules, PREFIX_LEN};
use crate::index::{check_against_shards, is_index_path, Checkpoint, ShardIndex};
use crate::location::{Location, Opened};
use crate::store::{store_error, Budget, Object, ObjectUrl, Side};
use crate::{Error, ErrorKind, Result};

/// The first range read of a safetensors object: most headers fit.
pub const FIRST_RANGE: u64 = 100_000;

/// An object opened as an input: read by ranges, or to be streamed whole.
pub(crate) enum ObjectInput {
    /// A safetensors object or an index of them, read by pinned ranges.
    Ranged(Box<dyn Source>),
    /// Any other format: the whole object as one pinned stream, to open as
    /// standard input is opened (detected, decompressed, spooled when its
    /// format needs seeking). `stem` names a lone .npy array.
    Whole {
        /// The object's bytes.
        reader: TensorReader<'static>,
        /// The name a lone array takes.
        stem: Option<String>,
        /// The object's size.
        size: u64,
        /// The ETag the stream is pinned to.
        etag: Option<String>,
    },
}

/// Opens the object at `url` as an input.
pub(crate) async fn open_object(url: &ObjectUrl, options: &SourceOptions) -> Result<ObjectInput> {
    let object = Object::open(url, Side::Input).await?;
    if is_index_path(Path::new(url.name())) {
        let src = ObjectSource::open_index(Pinned::head(object).await?).await?;
        return Ok(ObjectInput::Ranged(Box::new(src)));
    }
    let (pinned, first) = Pinned::first(object).await?;
    if options.raw.is_none() && detect(&first) == Format::SAFETENSORS {
        let src = ObjectSource::open(pinned, first).await?;
        return Ok(ObjectInput::Ranged(Box::new(src)));
    }
    let stem = url
        .name()
        .split('.')
        .next()
        .filter(|stem| !stem.is_empty())
        .map(str::to_string);
    let stem = options.name.clone().or(stem);
    let reader = pinned.reader(0, pinned.size).await?;
    let (size, etag) = (pinned.size, pinned.etag.clone());
    Ok(ObjectInput::Whole {
        reader,
        stem,
        size,
        etag,
    })
}

/// Opens the safetensors object, or the sharded checkpoint whose index is
/// the object, at `url`, reading headers only, for `validate` and
/// `inspect`: each shard's header under `rules`, and an index checked
/// against its shards as [`Checkpoint::open`] checks local ones.
pub async fn open_checkpoint(url: &ObjectUrl, rules: Rules) -> Result<Checkpoint> {
    let loc = Object::open(url, Side::Input).await?;
    if !is_index_path(Path::new(url.name())) {
        let header = Pinned::read_header(loc, rules).await?;
        return Ok(Checkpoint {
            index: None,
            files: vec![(Location::Object(url.clone()), header)],
        });
    }
    let (index, _, files) = Pinned::head(loc).await?.shards(rules).await?;
    Ok(Checkpoint {
        index: Some(index),
        files,
    })
}

/// Shards whose headers are read at once when a sharded checkpoint is
/// opened: 163 shards one after another took 30 s on a local server.
/// Memory: each holds at most [`FIRST_RANGE`] bytes, leased from the
/// process's [`Budget`], and its header.
const HEADERS_IN_FLIGHT: usize = 32;

/// The largest index read from object storage.
const MAX_INDEX_LEN: u64 = 100_000_000;

/// The largest object read whole, and held in memory, from a server that
/// ignores `Range` (answers a ranged GET with 200 and the whole object).
pub const WHOLE_OBJECT_LIMIT: u64 = 64 << 20;

/// Whether `e` says the server answered a ranged GET with the whole object
/// (the HTTP store's words, then the clouds' shared client's).
fn ignores_range(e: &object_store::Error) -> bool {
    let text = one_line(e);
    text.contains("Range request not supported")
        || text.contains("non-partial response when range requested")
}

/// An object as seen when planned: every read must find it unchanged.
struct Pinned {
    loc: Object,
    etag: Option<String>,
    size: u64,
    /// The whole object, once a server that ignores `Range` sent it (at
    /// most [`WHOLE_OBJECT_LIMIT`] bytes): every range is a slice of it.
    whole: tokio::sync::OnceCell<Bytes>,
}

/// Bytes of an object: a response to stream, or a slice of the object held.
enum Got {
    Response(GetResult),
    Held(Bytes),
}

impl Pinned {
    /// The object at `loc`, of this length and ETag.
    fn new(loc: Object, etag: Option<String>, size: u64) -> Pinned {
        Pinned {
            loc,
            etag,
            size,
            whole: tokio::sync::OnceCell::new(),
        }
    }

    /// Bytes `start..end` (not empty), pinned to the ETag: a ranged GET, or
    /// where the server ignores ranges, a slice of the whole object.
    async fn get(&self, start: u64, end: u64) -> Result<Got> {
        let slice = |whole: &Bytes| whole.slice(start as usize..end as usize);
        if let Some(whole) = self.whole.get() {
            return Ok(Got::Held(slice(whole)));
        }
        let options = GetOptions {
            if_match: self.etag.clone(),
            range: Some(GetRange::Bounded(start..end)),
            ..Default::default()
        };
        match self.loc.store.get_opts(&self.loc.path, options).await {
            Ok(got) => Ok(Got::Response(self.same_etag(got)?)),
            Err(e) if ignores_range(&e) => Ok(Got::Held(slice(self.whole_object().await?))),
            Err(e) => Err(self.error(e)),
        }
    }

    /// `got`, unless its ETag is not the one pinned: a server that ignores
    /// `If-Match` answers with the object as it is now, which would mix
    /// with the bytes already read of the object as planned.
    fn same_etag(&self, got: GetResult) -> Result<GetResult> {
        match (&self.etag, &got.meta.e_tag) {
            (Some(pinned), Some(now)) if pinned != now => Err(modified(&self.loc.url)),
            _ => Ok(got),
        }
    }

    /// The body of `got`, which answers bytes `start..end`, as a stream
    /// that fails as soon as the body runs past the range (never buffering
    /// what a lying server keeps sending) or ends before it ends.
    fn exact_body(
        &self,
        got: GetResult,
        start: u64,
        end: u64,
    ) -> BoxStream<'static, Result<Bytes>> {
        let url = self.loc.url.clone();
        let wrong = move |sent: u64| {
            let kind = ErrorKind::ObjectStore(StoreError::BodyLength { start, end, sent });
            Error::new(kind).with_input(&url)
        };
        let url = self.loc.url.clone();
        let body = got.into_stream().map_err(move |e| read_error(e, &url));
        let want = end - start;
        // The body, until its last byte has been read and its end seen.
        futures::stream::try_unfold((Some(body), 0u64), move |(body, sent)| {
            let wrong = wrong.clone();
            async move {
                let Some(mut body) = body else {
                    return Ok(None);
                };
                let Some(bytes) = body.try_next().await? else {
                    return if sent < want {
                        Err(wrong(sent))
                    } else {
                        Ok(None)
                    };
                };
                let sent = sent + bytes.len() as u64;
                if sent > want {
                    return Err(wrong(sent));
                }
                if sent < want {
                    return Ok(Some((bytes, (Some(body), sent))));
                }
                // The range is whole: the body must end here, before its
                // last bytes are given (a reader stops asking once it has them).
                match body.try_next().await? {
                    Some(more) => Err(wrong(sent + more.len() as u64)),
                    None => Ok(Some((bytes, (None, sent)))),
                }
            }
        })
        .boxed()
    }

    /// The body of `got` (bytes `start..end`) in memory: exactly its bytes,
    /// in one piece (the client's own when it gave one, no copy).
    ///
    /// Each piece is copied into the whole as it comes and dropped: the
    /// client's pieces are slices of its read buffers (up to ~400 KiB
    /// each), so keeping them until the body ends held a window's bytes
    /// twice, outside the budget's lease (heaptrack, S3 -> S3 on the
    /// scale benchmark: 15 MB of the heap's peak; benches/scale/README.md,
    /// session 13).
    async fn collect_exact(&self, got: GetResult, start: u64, end: u64) -> Result<Bytes> {
        let mut body = self.exact_body(got, start, end);
        let Some(first) = body.try_next().await? else {
            return Ok(Bytes::new());
        };
        // The range is asked for by us and bounded by the caller (a window,
        // a checked header length, the whole-object limit), not by the body.
        let want = (end - start) as usize;
        if first.len() == want {
            return Ok(first);
        }
        let mut whole = BytesMut::with_capacity(want);
        whole.extend_from_slice(&first);
        drop(first);
        while let Some(bytes) = body.try_next().await? {
            whole.extend_from_slice(&bytes);
        }
        Ok(whole.freeze())
    }

    /// The whole object, by one GET (once), from a server that ignores
    /// `Range`: refused past [`WHOLE_OBJECT_LIMIT`] bytes.
    async fn whole_object(&self) -> Result<&Bytes> {
        if self.size > WHOLE_OBJECT_LIMIT {
            let kind = ErrorKind::ObjectStore(StoreError::RangesIgnored {
                size: self.size,
                limit: WHOLE_OBJECT_LIMIT,
            });
            return Err(Error::new(kind).with_input(&self.loc.url));
        }
        self.whole
            .get_or_try_init(|| async {
                let options = GetOptions {
                    if_match: self.etag.clone(),
                    ..Default::default()
                };
                let got = self.loc.store.get_opts(&self.loc.path, options).await;
                let got = self.same_etag(got.map_err(|e| self.error(e))?)?;
                self.collect_exact(got, 0, self.size).await
            })
            .await
    }

    fn error(&self, e: object_store::Error) -> Error {
        read_error(e, &self.loc.url)
    }

    /// Bytes `start..end`, whole (for headers: small and bounded).
    async fn range(&self, start: u64, end: u64) -> Result<Vec<u8>> {
        Ok(self.range_bytes(start, end).await?.to_vec())
    }

    /// Bytes `start..end`, whole, as the client gave them (no copy).
    async fn range_bytes(&self, start: u64, end: u64) -> Result<Bytes> {
        if start >= end {
            return Ok(Bytes::new());
        }
        match self.get(start, end).await? {
            Got::Response(got) => self.collect_exact(got, start, end).await,
            Got::Held(bytes) => Ok(bytes),
        }
    }

    /// The object's header under `rules`: `first` holds its first bytes; a
    /// header longer than them is fetched by a second range, once its
    /// claimed length has been checked against the object's.
    async fn header(&self, mut first: Vec<u8>, rules: Rules) -> Result<Header> {
        let on_input = |e: Error| e.with_input(&self.loc.url);
        if first.len() as u64 >= PREFIX_LEN {
            let mut prefix = [0u8; 8];
            prefix.copy_from_slice(&first[..8]);
            let n = check_prefix(prefix, self.size).map_err(on_input)?;
            let end = PREFIX_LEN + n;
            let have = first.len() as u64;
            if end > have {
                first.extend(self.range(have, end).await?);
            }
        }
        read_header(&mut first.as_slice(), self.size, rules).map_err(on_input)
    }

    /// Pins the object at `loc` by one GET of its first [`FIRST_RANGE`]
    /// bytes: the answer gives its length and ETag too, so no HEAD is
    /// needed. Where that GET is refused (a server ignoring ranges, an
    /// empty object), a HEAD pins it and the first range is read as usual,
    /// so that its errors are those of a HEAD.
    async fn first(loc: Object) -> Result<(Pinned, Vec<u8>)> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(0..FIRST_RANGE)),
            ..Default::default()
        };
        let ignored = match loc.store.get_opts(&loc.path, options).await {
            Ok(got) => {
                let (size, etag) = (got.meta.size, got.meta.e_tag.clone());
                let pinned = Pinned::new(loc, etag, size);
                let first = pinned.collect_exact(got, 0, size.min(FIRST_RANGE)).await?;
                return Ok((pinned, first.to_vec()));
            }
            Err(e) => ignores_range(&e),
        };
        if !ignored {
            return Pinned::head_then_first(loc).await;
        }
        // The whole object at once (what any range of it would cost).
        let pinned = Pinned::head(loc).await?;
        let whole = pinned.whole_object().await?;
        let first = whole[..whole.len().min(FIRST_RANGE as usize)].to_vec();
        Ok((pinned, first))
    }

    /// Pins the object at `loc` by a HEAD, then reads its first range.
    async fn head_then_first(loc: Object) -> Result<(Pinned, Vec<u8>)> {
        let pinned = Pinned::head(loc).await?;
        let first = pinned.range(0, pinned.size.min(FIRST_RANGE)).await?;
        Ok((pinned, first))
    }

    /// The shard at `loc`, pinned, and its header under `rules`; its first
    /// range is leased from the process's [`Budget`] until parsed.
    async fn shard(loc: Object, rules: Rules) -> Result<(Pinned, Header)> {
        let _lease = Budget::process().lease(FIRST_RANGE).await;
        let (shard, first) = Pinned::first(loc).await?;
        let header = shard.header(first, rules).await?;
        Ok((shard, header))
    }

    /// Pins the object at `loc`: its length and ETag, by a HEAD.
    async fn head(loc: Object) -> Result<Pinned> {
        let meta = loc
            .store
            .head(&loc.path)
            .await
            .map_err(|e| store_error(e, &loc.url))?;
        Ok(Pinned::new(loc, meta.e_tag, meta.size))
    }

    /// The whole header of the safetensors object at `loc`.
    async fn read_header(loc: Object, rules: Rules) -> Result<Header> {
        let (pinned, first) = Pinned::first(loc).await?;
        pinned.header(first, rules).await
    }

    /// This index object's parsed index, and every shard it names, pinned,
    /// with its header under `rules` (named by URL), checked against the
    /// index as local shards are.
    async fn shards(
        &self,
        rules: Rules,
    ) -> Result<(ShardIndex, Vec<Pinned>, Vec<(Location, Header)>)> {
        let url = &self.loc.url;
        let text = self.whole_index().await?;
        let index = ShardIndex::from_json(&text).map_err(|e| e.with_input(url))?;
        let names = index.shard_names().map_err(|e| e.with_input(url))?;
        // Every shard's header, HEADERS_IN_FLIGHT GETs at a time, kept in
        // the index's order; the first error (in that order) is told.
        // Built first, each from an owned object: a future that borrows
        // from a closure's argument is not Send for every lifetime.
        let each: Vec<_> = names
            .into_iter()
            .map(|name| Pinned::shard(self.loc.sibling(name), rules))
            .collect();
        let read: Vec<(Pinned, Header)> = futures::stream::iter(each)
            .buffered(HEADERS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut pinned = Vec::with_capacity(read.len());
        let mut files = Vec::with_capacity(read.len());
        for (shard, header) in read {
            files.push((Location::Object(shard.loc.at.clone()), header));
            pinned.push(shard);
        }
        // Each shard by the name the index gives it: its URL's last segment.
        let names = pinned.iter().map(|p| p.loc.at.name().to_string());
        let named: Vec<_> = names.zip(files.iter().map(|(_, h)| h)).collect();
        check_against_shards(&index, &named).map_err(|e| e.with_input(url))?;
        Ok((index, pinned, files))
    }

    /// The whole object, an index: refused past [`MAX_INDEX_LEN`] bytes.
    async fn whole_index(&self) -> Result<Vec<u8>> {
        if self.size > MAX_INDEX_LEN {
            let kind = ErrorKind::FileTooLarge {
                what: "index file",
                limit: MAX_INDEX_LEN,
            };
            return Err(Error::new(kind).with_input(&self.loc.url));
        }
        self.range(0, self.size).await
    }

    /// Bytes `start..end` as a stream.
    async fn reader(&self, start: u64, end: u64) -> Result<TensorReader<'static>> {
        if start >= end {
            return Ok(Box::pin(tokio::io::empty()));
        }
        let got = match self.get(start, end).await? {
            Got::Response(got) => got,
            Got::Held(bytes) => return Ok(Box::pin(std::io::Cursor::new(bytes))),
        };
        let stream = self.exact_body(got, start, end).map_err(Error::into_io);
        Ok(Box::pin(tokio_util::io::StreamReader::new(stream)))
    }
}

/// Tensors of at most this many bytes are read from a window
/// ([`windows`]) rather than by a GET of their own.
const SMALL_TENSOR: u64 = 1 << 20;

/// The largest `config.json` read beside an object (as beside a file).
const MAX_CONFIG_LEN: u64 = 16 << 20;

/// A safetensors object, or a sharded checkpoint's objects, read by ranges.
pub(crate) struct ObjectSource {
    /// Shards' metadata merged in shard order, as for local shards.
    listing: Listing,
    /// The index object, for a sharded checkpoint.
    index: Option<Pinned>,
    /// The objects whose tensors it lists.
    objects: Vec<Arc<Pinned>>,
    /// Each object's bytes for positional reads, shared by the spans of
    /// its tensors ([`Source::byte_span`]) rather than one a span.
    spans: Vec<Arc<dyn ReadAt>>,
    /// Each tensor's object and absolute byte range in it.
    ranges: Vec<(usize, u64, u64)>,
    /// Windows of the objects' bytes, shared by every read.
    windows: Arc<windows::Windows>,
    /// The runtime the objects were opened on, for blocking readers.
    runtime: tokio::runtime::Handle,
    /// The `config.json` beside the input, if there is one.
    config: Option<Vec<u8>>,
    /// Tensors planning reads ([`quantized::read_while_planning`]), read at opening.
    held: HashMap<usize, Bytes>,
}

impl ObjectSource {
    /// One object whose first bytes are `first`.
    async fn open(object: Pinned, first: Vec<u8>) -> Result<ObjectSource> {
        let header = object.header(first, Rules::SOURCE).await?;
        let input = object.loc.url.clone();
        let config = config_beside(&object.loc).await?;
        let mut src = Self::from_parts(input, vec![(object, header)], config);
        src.read_held().await?;
        Ok(src)
    }

    /// A sharded checkpoint by its index object: every shard's header,
    /// checked against the index as local shards are.
    async fn open_index(index: Pinned) -> Result<ObjectSource> {
        let (_, pinned, files) = index.shards(Rules::SOURCE).await?;
        let parts = pinned.into_iter().zip(files.into_iter().map(|(_, h)| h));
        let config = config_beside(&index.loc).await?;
        let mut src = Self::from_parts(index.loc.url.clone(), parts.collect(), config);
        src.index = Some(index);
        src.read_held().await?;
        Ok(src)
    }

    fn from_parts(
        input: String,
        parts: Vec<(Pinned, Header)>,
        config: Option<Vec<u8>>,
    ) -> ObjectSource {
        // Sized once: lists grown by doubling hold room never used.
        let count = parts.iter().map(|(_, h)| h.tensors.len()).sum();
        let mut listing = Listing::new(input);
        listing.tensors.reserve_exact(count);
        let mut src = ObjectSource {
            listing,
            index: None,
            objects: Vec::with_capacity(parts.len()),
            spans: Vec::with_capacity(parts.len()),
            ranges: Vec::with_capacity(count),
            windows: windows::Windows::new(Budget::process()),
            runtime: tokio::runtime::Handle::current(),
            config,
            held: HashMap::new(),
        };
        for (index, (object, header)) in parts.into_iter().enumerate() {
            let start = header.data_start();
            if let Some(md) = header.metadata {
                let metadata = src.listing.metadata.get_or_insert_with(Metadata::new);
                metadata.extend(md);
            }
            for t in header.tensors {
                // Checked against the object's length by the header's rules.
                src.ranges
                    .push((index, start + t.begin, start + t.begin + t.len()));
                src.listing.tensors.push(t.meta);
            }
            let object = Arc::new(object);
            src.spans.push(Arc::new(windows::ObjectBytes {
                id: index,
                object: Arc::clone(&object),
                windows: Arc::clone(&src.windows),
                runtime: src.runtime.clone(),
            }));
            src.objects.push(object);
        }
        src
    }

    /// Reads the tensors that planning reads (small records), so that
    /// planning, on the runtime's own thread, never waits for a GET.
    async fn read_held(&mut self) -> Result<()> {
        for (k, t) in self.listing.tensors.iter().enumerate() {
            let (o, start, end) = self.ranges[k];
            if super::quantized::read_while_planning(&t.name)
                && end - start <= super::quantized::record::MAX_RECORD
            {
                let bytes = self.objects[o].range_bytes(start, end).await?;
                self.held.insert(k, bytes);
            }
        }
        Ok(())
    }
}

/// The `config.json` beside the object at `loc` (a model's quantization
/// settings), if there is one; `None` as for a file when there is none or
/// it is too large to be a model's config.
async fn config_beside(loc: &Object) -> Result<Option<Vec<u8>>> {
    let config = loc.sibling("config.json");
    let pinned = match config.store.head(&config.path).await {
        Ok(meta) => Pinned::new(config, meta.e_tag, meta.size),
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(store_error(e, &config.url)),
    };
    if pinned.size > MAX_CONFIG_LEN {
        return Ok(None);
    }
    Ok(Some(pinned.range(0, pinned.size).await?))
}

/// Bytes held in memory, read as a file is.
#[derive(Debug)]
struct Held(Bytes);

impl ReadAt for Held {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.0.get(start..end))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl Source for ObjectSource {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn opened(&self) -> Vec<Opened> {
        let pinned = self.index.iter().chain(self.objects.iter().map(|o| &**o));
        let each = pinned.map(|o| Opened::object(&o.loc.at, o.size, o.etag.clone()));
        each.collect()
    }

    fn identity(&self) -> Option<String> {
        let each = self.objects.iter().map(|o| match &o.etag {
            Some(etag) => format!("size={};etag={etag}", o.size),
            None => format!("size={}", o.size),
        });
        Some(each.collect::<Vec<_>>().join(","))
    }

    fn will_read(&self, order: &[usize]) {
        // Those read from windows; a large tensor streams from its own GET.
        let small =
            |&(_, start, end): &(usize, u64, u64)| start < end && end - start <= SMALL_TENSOR;
        let ranges = order.iter().filter_map(|&k| self.ranges.get(k).copied());
        self.windows
            .expect(&self.objects, ranges.filter(small).collect());
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let (id, start, end) = self.ranges[k];
        let object = &self.objects[id];
        let windows = &self.windows;
        async move {
            if end - start <= SMALL_TENSOR && start < end {
                let bytes = windows.read(id, object, start, end).await?;
                return Ok(TensorData::new(std::io::Cursor::new(bytes)));
            }
            // Its own GET; the next small tensor still reads on forward.
            windows.went_to(id, start, end);
            Ok(TensorData::new(object.reader(start, end).await?))
        }
        .boxed()
    }

    fn byte_span(&self, k: usize) -> Option<ByteSpan> {
        let (id, start, end) = self.ranges[k];
        if let Some(bytes) = self.held.get(&k) {
            return Some(ByteSpan {
                bytes: Arc::new(Held(bytes.clone())),
                offset: 0,
                len: end - start,
            });
        }
        Some(ByteSpan {
            bytes: Arc::clone(&self.spans[id]),
            offset: start,
            len: end - start,
        })
    }

    fn config_beside(&self) -> Option<&[u8]> {
        self.config.as_deref()
    }
}

/// A read of the object at `url` that failed: replaced since it was
/// pinned (a failed `If-Match`), or the store's error.
fn read_error(e: object_store::Error, url: &str) -> Error {
    match e {
        object_store::Error::Precondition { .. } => modified(url),
        e => store_error(e, url),
    }
}

/// The object at `url` is no longer the one pinned.
fn modified(url: &str) -> Error {
    Error::new(ErrorKind::InputModified).with_input(url)
}
