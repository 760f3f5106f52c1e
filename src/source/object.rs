//! An object as an input. A safetensors object is read by ranges: its
//! header by one GET of the first [`FIRST_RANGE`] bytes (and a second only
//! for a larger header), each tensor by its own streaming GET. Every GET
//! is pinned to the ETag seen when the object was planned, so that an
//! object replaced mid-run is refused, as a local file that changes is.
//! Any other format is handed back as one pinned stream, which the
//! source layer's input opening reads as it reads standard input
//! (decompressed, spooled when its format needs seeking).
//!
//! Layer: source. May import the source facade and detection, the header
//! and index layers, the store client and below; never the opening of
//! inputs (which imports this).

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, TryStreamExt};
use object_store::{GetOptions, GetRange, GetResult, ObjectStoreExt};

use std::path::{Path, PathBuf};

use super::detect::{detect, Format};
use super::{Source, SourceOptions, TensorData, TensorReader};
use crate::error::store::{one_line, StoreError};
use crate::header::read::read_header;
use crate::header::{check_prefix, Header, Metadata, Rules, TensorMeta, PREFIX_LEN};
use crate::index::{check_against_shards, is_index_path, Checkpoint, ShardIndex};
use crate::store::{store_error, Object, Side};
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
    },
}

/// Opens the object at `url` as an input.
pub(crate) async fn open_object(url: &str, options: &SourceOptions) -> Result<ObjectInput> {
    let pinned = Pinned::head(Object::open(url, Side::Input).await?).await?;
    if is_index_path(Path::new(url)) {
        let src = ObjectSource::open_index(pinned).await?;
        return Ok(ObjectInput::Ranged(Box::new(src)));
    }
    let first = pinned.range(0, pinned.size.min(FIRST_RANGE)).await?;
    if options.raw.is_none() && detect(&first) == Format::SAFETENSORS {
        let src = ObjectSource::open(pinned, first).await?;
        return Ok(ObjectInput::Ranged(Box::new(src)));
    }
    let stem = url
        .rsplit('/')
        .next()
        .and_then(|name| name.split('.').next())
        .filter(|stem| !stem.is_empty())
        .map(str::to_string);
    let stem = options.name.clone().or(stem);
    let reader = pinned.reader(0, pinned.size).await?;
    Ok(ObjectInput::Whole { reader, stem })
}

/// Opens the safetensors object, or the sharded checkpoint whose index is
/// the object, at `url`, reading headers only, for `validate` and
/// `inspect`: each shard's header under `rules`, and an index checked
/// against its shards as [`Checkpoint::open`] checks local ones.
pub async fn open_checkpoint(url: &str, rules: Rules) -> Result<Checkpoint> {
    let loc = Object::open(url, Side::Input).await?;
    if !is_index_path(Path::new(url)) {
        let header = Pinned::read_header(loc, rules).await?;
        return Ok(Checkpoint {
            index: None,
            files: vec![(PathBuf::from(url), header)],
        });
    }
    let (index, _, files) = Pinned::head(loc).await?.shards(rules).await?;
    Ok(Checkpoint {
        index: Some(index),
        files,
    })
}

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
            Ok(got) => Ok(Got::Response(got)),
            Err(e) if ignores_range(&e) => Ok(Got::Held(slice(self.whole_object().await?))),
            Err(e) => Err(self.error(e)),
        }
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
                let bytes = got
                    .map_err(|e| self.error(e))?
                    .bytes()
                    .await
                    .map_err(|e| self.error(e))?;
                if bytes.len() as u64 != self.size {
                    let changed = ErrorKind::InputChanged {
                        opened: self.size,
                        now: bytes.len() as u64,
                    };
                    return Err(Error::new(changed).with_input(&self.loc.url));
                }
                Ok(bytes)
            })
            .await
    }

    fn error(&self, e: object_store::Error) -> Error {
        match e {
            object_store::Error::Precondition { .. } => {
                Error::new(ErrorKind::InputModified).with_input(&self.loc.url)
            }
            e => store_error(e, &self.loc.url),
        }
    }

    /// Bytes `start..end`, whole (for headers: small and bounded).
    async fn range(&self, start: u64, end: u64) -> Result<Vec<u8>> {
        if start >= end {
            return Ok(Vec::new());
        }
        match self.get(start, end).await? {
            Got::Response(got) => {
                let bytes = got.bytes().await.map_err(|e| self.error(e))?;
                Ok(bytes.to_vec())
            }
            Got::Held(bytes) => Ok(bytes.to_vec()),
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
        Pinned::head(loc).await?.whole_header(rules).await
    }

    /// This object's header, from its first range (and a second if need be).
    async fn whole_header(&self, rules: Rules) -> Result<Header> {
        let first = self.range(0, self.size.min(FIRST_RANGE)).await?;
        self.header(first, rules).await
    }

    /// This index object's parsed index, and every shard it names, pinned,
    /// with its header under `rules` (named by URL), checked against the
    /// index as local shards are.
    async fn shards(
        &self,
        rules: Rules,
    ) -> Result<(ShardIndex, Vec<Pinned>, Vec<(PathBuf, Header)>)> {
        let url = &self.loc.url;
        let text = self.whole_index().await?;
        let index = ShardIndex::from_json(&text).map_err(|e| e.with_input(url))?;
        let mut pinned = Vec::new();
        let mut files = Vec::new();
        for name in index.shard_names().map_err(|e| e.with_input(url))? {
            let shard = Pinned::head(self.loc.sibling(name)).await?;
            files.push((
                PathBuf::from(&shard.loc.url),
                shard.whole_header(rules).await?,
            ));
            pinned.push(shard);
        }
        check_against_shards(&index, &files).map_err(|e| e.with_input(url))?;
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
        let url = self.loc.url.clone();
        let stream = got.into_stream().map_err(move |e| match e {
            object_store::Error::Precondition { .. } => {
                std::io::Error::other(format!("{url}: the object was replaced while being read"))
            }
            e => std::io::Error::other(one_line(&e)),
        });
        Ok(Box::pin(tokio_util::io::StreamReader::new(stream)))
    }
}

/// A safetensors object, or a sharded checkpoint's objects, read by ranges.
pub(crate) struct ObjectSource {
    input: String,
    objects: Vec<Pinned>,
    tensors: Vec<TensorMeta>,
    /// Each tensor's object and absolute byte range in it.
    ranges: Vec<(usize, u64, u64)>,
    metadata: Option<Metadata>,
}

impl ObjectSource {
    /// One object whose first bytes are `first`.
    async fn open(object: Pinned, first: Vec<u8>) -> Result<ObjectSource> {
        let header = object.header(first, Rules::SOURCE).await?;
        let input = object.loc.url.clone();
        Ok(Self::from_parts(input, vec![(object, header)]))
    }

    /// A sharded checkpoint by its index object: every shard's header,
    /// checked against the index as local shards are.
    async fn open_index(index: Pinned) -> Result<ObjectSource> {
        let (_, pinned, files) = index.shards(Rules::SOURCE).await?;
        let parts = pinned.into_iter().zip(files.into_iter().map(|(_, h)| h));
        Ok(Self::from_parts(index.loc.url, parts.collect()))
    }

    fn from_parts(input: String, parts: Vec<(Pinned, Header)>) -> ObjectSource {
        let mut src = ObjectSource {
            input,
            objects: Vec::with_capacity(parts.len()),
            tensors: Vec::new(),
            ranges: Vec::new(),
            metadata: None,
        };
        for (index, (object, header)) in parts.into_iter().enumerate() {
            let start = header.data_start();
            // Shards' metadata merge in shard order, as for local shards.
            if let Some(md) = header.metadata {
                src.metadata.get_or_insert_with(Metadata::new).extend(md);
            }
            for t in header.tensors {
                // Checked against the object's length by the header's rules.
                src.ranges
                    .push((index, start + t.begin, start + t.begin + t.len()));
                src.tensors.push(t.meta);
            }
            src.objects.push(object);
        }
        src
    }
}

impl Source for ObjectSource {
    fn input_name(&self) -> &str {
        &self.input
    }

    fn tensors(&self) -> &[TensorMeta] {
        &self.tensors
    }

    fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    fn identity(&self) -> Option<String> {
        let each = self.objects.iter().map(|o| match &o.etag {
            Some(etag) => format!("size={};etag={etag}", o.size),
            None => format!("size={}", o.size),
        });
        Some(each.collect::<Vec<_>>().join(","))
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let (object, start, end) = self.ranges[k];
        let object = &self.objects[object];
        async move { Ok(TensorData::new(object.reader(start, end).await?)) }.boxed()
    }
}
