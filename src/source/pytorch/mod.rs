//! PyTorch checkpoints (`pytorch_model.bin`, `*.pt`, `*.pth`) as a source,
//! read without executing their pickle.
//!
//! Both `torch.save` formats are read: the zip format ([`zipfmt`]) and the
//! legacy one ([`legacy`]), and a `pytorch_model.bin.index.json` with its
//! shards. The pickle is interpreted by our own restricted unpickler
//! ([`pickle`]), which builds values and never calls anything; [`model`]
//! turns its value tree into named tensor views of storages, each bounds-
//! checked; contiguous views are copied straight from the file,
//! strided ones gathered into C order in bounded memory ([`strided`]).

pub(crate) mod legacy;
pub mod model;
pub mod pickle;
pub(crate) mod row;
pub(crate) mod strided;
pub(crate) mod zipfmt;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;

use self::model::{Naming, Place, Strides, Tree};
use self::pickle::{unpickle, Limits};
use self::strided::{StridedReader, View};
pub(crate) use self::zipfmt::is_torch_zip as is_torch_directory;
use super::blocking::BlockingReader;
use super::zip::{read_directory, MemberReader, Method, ZipEntry};
use super::{
    file_range, BlockingRead, CrcCheck, FileSpan, Listing, OpenBlocking, Source, SourceOptions,
    TensorData,
};
use crate::dtype::numel;
use crate::header::names::first_repeated;
use crate::header::{Metadata, TensorMeta};
use crate::index::{check_weight_map, ShardIndex};
use crate::io_util::PositionalReader;
use crate::limits::Limit;
use crate::transform::Transform;
use crate::{Dtype, Error, ErrorKind, HeaderError, PickleError, PyTorchError, Result};

/// Where one storage's bytes lie in its file.
#[derive(Debug, Clone, Copy)]
pub struct Located {
    /// Its first byte.
    pub start: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The zip member's CRC-32, when the archive recorded one.
    pub crc: Option<u32>,
}

/// A file's storages by key, sorted: 30 bytes a storage (a million of
/// them) where a boxed key beside each place took 48, and a hash map of
/// keys with a zip entry each 250. The walk that names the tensors
/// resolves their storages' keys here, so that no other copy of the keys
/// is made.
#[derive(Debug, Default)]
pub struct Storages {
    /// Every key, one after another, in key order.
    keys: String,
    by_key: Vec<Stored>,
}

/// One storage in [`Storages`]: 24 bytes.
#[derive(Debug, Clone, Copy)]
struct Stored {
    start: u64,
    len: u64,
    /// Where its key ends in [`Storages::keys`] (the last one's end starts it).
    key_end: u32,
    /// Its CRC-32, 0 for none: what torch writes when it computed none.
    crc: u32,
}

impl Storages {
    /// The table of `list`; a key listed twice is refused.
    pub(crate) fn new(mut list: Vec<(Box<str>, Located)>) -> Result<Storages> {
        list.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = list.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(bad(PyTorchError::ListedTwice(w[0].0.to_string())));
        }
        let bytes: usize = list.iter().map(|(k, _)| k.len()).sum();
        if u32::try_from(bytes).is_err() {
            return Err(bad(PyTorchError::StorageKeys(bytes as u64)));
        }
        let mut table = Storages {
            keys: String::with_capacity(bytes),
            by_key: Vec::with_capacity(list.len()),
        };
        for (key, at) in list {
            table.keys.push_str(&key);
            table.by_key.push(Stored {
                start: at.start,
                len: at.len,
                key_end: table.keys.len() as u32,
                crc: at.crc.unwrap_or(0),
            });
        }
        Ok(table)
    }

    /// Every storage `p` declares, as if a file held each at the length
    /// its first declaration gives: what a pickle's views are checked
    /// against with no file at hand (tests, fuzzing).
    #[cfg(any(test, feature = "internals"))]
    pub fn declared(p: &pickle::Pickled) -> Result<Storages> {
        let list = model::first_declarations(p)
            .into_iter()
            .map(|(key, decl)| {
                let len = decl.bytes().unwrap_or(u64::MAX);
                let place = Located {
                    start: 0,
                    len,
                    crc: None,
                };
                (key, place)
            })
            .collect();
        Storages::new(list)
    }

    /// Storage `key`'s index and place.
    pub(crate) fn find(&self, key: &str) -> Option<(u32, Located)> {
        // A binary search by index: a key's start is its neighbour's end.
        let (mut lo, mut hi) = (0, self.by_key.len() as u32);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, at) = self.get(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some((mid, at)),
            }
        }
        None
    }

    /// Storage `i`'s key and place.
    pub fn get(&self, i: u32) -> (&str, Located) {
        let i = i as usize;
        let s = self.by_key[i];
        let from = i
            .checked_sub(1)
            .map_or(0, |p| self.by_key[p].key_end as usize);
        let place = Located {
            start: s.start,
            len: s.len,
            crc: (s.crc != 0).then_some(s.crc),
        };
        (&self.keys[from..s.key_end as usize], place)
    }

    /// How many storages there are.
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// One checkpoint file, parsed and located.
struct CheckpointFile {
    file: File,
    len: u64,
    tree: Tree,
    storages: Storages,
    /// What a storage's key completes into its zip member's name.
    data_prefix: String,
    big_endian: bool,
    name: String,
}

/// A PyTorch checkpoint (one file or a sharded set) as a source.
#[derive(Debug)]
pub(crate) struct PyTorchSource {
    /// The location it was opened from, reported first by `opened`.
    pub(crate) origin: Option<crate::location::Opened>,
    /// Its metadata is `{"format": "pt"}`.
    listing: Listing,
    files: Vec<Arc<File>>,
    stamps: Vec<super::Stamp>,
    /// The shards an index named, as opened (none for one file).
    shards: Vec<crate::location::Opened>,
    placed: Vec<Place>,
    /// The strides of the views that are not contiguous.
    strides: Strides,
    skipped: usize,
    skipped_paths: Vec<String>,
    /// Storages whose whole member passed its CRC-32: views that split a
    /// storage are checked by one pass over all of it.
    verified: Verified,
    /// Groups of identical views (tied weights), found whether or not
    /// `--dedupe-tied` asks to write each group once.
    tied: Vec<Vec<usize>>,
    /// Whether `--dedupe-tied` asks: the planner then gets [`Self::tied`].
    dedupe_tied: bool,
    /// A single file's top-level keys holding all its tensors
    /// ([`model::Tree::under_keys`]).
    under_keys: Vec<(String, usize)>,
    /// Each file's storages and the prefix of their members' names, for
    /// the zip entry a checked read needs.
    storages: Vec<(Storages, String)>,
    /// Each file's byte order (`true`: big-endian).
    big_endian: Vec<bool>,
}

/// A view may be at most `expansion-ratio` times its storage's bytes
/// ([`Limit::ExpansionRatio`], 16), unless it is at most
/// `expanded-view-bytes` ([`Limit::ExpandedViewBytes`], 4 MiB: a 2048 x
/// 2048 f8 mask, 1M int32 position ids) or
/// [`TorchOptions::allow_expanded_views`](row::TorchOptions::allow_expanded_views):
/// a small broadcast that `torch.save` kept as a stride-0 view
/// (`x.expand(3, n)`) converts, one float viewed as 2^40 does not.
/// Amplification is the danger, not the ratio of a small buffer. The
/// tensors of a checkpoint (all its shards, tied views each counted) are
/// bound alike as a whole, by the ratio and `expanded-file-bytes`
/// ([`Limit::ExpandedFileBytes`], 64 MiB: 16 views of 4 MiB).
///
/// True if `bytes` written from `stored` bytes of storage stay within
/// `factor` times them, or within `allowance` bytes whatever the factor.
fn expansion_allowed(bytes: u64, stored: u64, factor: u64, allowance: u64) -> bool {
    bytes <= stored.saturating_mul(factor).max(allowance)
}

/// A [`PyTorchError`] as an [`Error`], for this module and its children.
fn bad(e: PyTorchError) -> Error {
    Error::new(ErrorKind::PyTorch(e))
}

fn naming(options: &SourceOptions) -> Naming {
    Naming {
        root: options.torch.root.clone(),
        bare: options.name.clone(),
    }
}

/// True if a zip's members make it a PyTorch (or TorchScript) archive.
pub(crate) fn is_torch_zip(file: &File, len: u64) -> bool {
    read_directory(file, len).is_ok_and(|(entries, _)| is_torch_directory(&entries))
}

/// True if `path` names a PyTorch shard index (`pytorch_model.bin.index.json`).
pub(crate) fn is_index_path(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        [".bin.index.json", ".pt.index.json", ".pth.index.json"]
            .iter()
            .any(|s| n.ends_with(s))
    })
}

/// The bounds on one pickle of `len` bytes: the parser's own counts, and
/// a budget of twice its bytes + the caller's `pickle-budget`.
fn pickle_limits(len: usize, limits: &crate::limits::Limits) -> Limits {
    let extra = usize::try_from(limits.get(Limit::PickleBudget)).unwrap_or(usize::MAX);
    Limits {
        budget: len
            .saturating_mul(pickle::BUDGET_FACTOR)
            .saturating_add(extra),
        ..Limits::for_input(len)
    }
}

/// A refusal by the pickle's budget or the size of `data.pkl` as the
/// caller's limit that fired; other errors as they are.
fn as_limit(e: Error, limits: &crate::limits::Limits) -> Error {
    let (limit, what) = match e.kind() {
        ErrorKind::Pickle(PickleError::Budget { limit, what }) => (
            Limit::PickleBudget,
            format!("pickle would build more than its budget of {limit} bytes of values ({what})"),
        ),
        // `byteorder` has a bound of its own, which no limit sets.
        ErrorKind::PyTorch(PyTorchError::MemberTooLarge { member, size, .. })
            if member.ends_with("data.pkl") =>
        {
            (
                Limit::PickleBytes,
                format!("member {member:?} is {size} bytes"),
            )
        }
        _ => return e,
    };
    let offset = e.offset();
    let refused = limits.refuse(limit, what);
    match offset {
        Some(o) => refused.at_offset(o),
        None => refused,
    }
}

fn open_part(file: File, len: u64, name: &str, options: &SourceOptions) -> Result<CheckpointFile> {
    let limits = &options.limits;
    open_part_within(file, len, name, options).map_err(|e| as_limit(e, limits))
}

fn open_part_within(
    file: File,
    len: u64,
    name: &str,
    options: &SourceOptions,
) -> Result<CheckpointFile> {
    let naming = &naming(options);
    let limits = &options.limits;
    let max_pickle = limits.get(Limit::PickleBytes);
    let mut first = [0u8; 16];
    let got = {
        use std::os::unix::fs::FileExt;
        file.read_at(&mut first, 0).map_err(Error::io)?
    };
    if legacy::is_legacy(&first[..got]) {
        let c = legacy::open(&file, len, max_pickle, |n| pickle_limits(n, limits))?;
        let storages = legacy::locate(&file, len, &c, &model::all_storages(&c.main)?)?;
        let tree = model::tensors(&c.main, naming, &storages)?;
        return Ok(CheckpointFile {
            file,
            len,
            tree,
            storages,
            data_prefix: String::new(),
            big_endian: c.big_endian,
            name: name.to_string(),
        });
    }
    let (entries, dir_start) = read_directory(&file, len)?;
    let c = zipfmt::open_within(&file, &entries, dir_start, max_pickle)?;
    // Each phase frees what the next does not need before it allocates:
    // the directory (a million storages' entries) before the pickle is
    // read, the pickle's bytes (100 MB) and memo before its tensors are
    // named, the pickle's values before the tensors are checked; and
    // tells the caller, who may hand it back to the system, when it is
    // that large.
    let freed = |large| {
        if large {
            options.freed_memory.call()
        }
    };
    let large = c.pickle.0.uncompressed >= LARGE_PICKLE;
    drop(entries);
    freed(large);
    let pickle = zipfmt::read_pickle(&file, &c)?;
    let (p, _) = unpickle(&pickle, pickle_limits(pickle.len(), limits))?;
    drop(pickle);
    freed(large);
    let tree = model::tensors(&p, naming, &c.storages)?;
    drop(p);
    freed(large);
    Ok(CheckpointFile {
        file,
        len,
        tree,
        storages: c.storages,
        data_prefix: c.data_prefix,
        big_endian: c.big_endian,
        name: name.to_string(),
    })
}

/// A pickle from this many bytes (about 100,000 tensors) frees enough
/// between the phases of its opening to be worth handing back at once
/// ([`SourceOptions::freed_memory`]); for a small checkpoint a purge only
/// costs, its pages soon faulted in again (benches/README.md, "Copy path").
const LARGE_PICKLE: u64 = 10 << 20;

/// What makes two views identical: file, storage, dtype, and shape,
/// stride and offset (a `u64::MAX` between shape and stride).
type TieKey = (u32, u32, Dtype, Vec<u64>);

fn tie_key(t: &TensorMeta, p: Place, stride: Option<&[u64]>) -> TieKey {
    let v = model::view(t, p, stride);
    let mut key = v.shape.clone();
    key.push(u64::MAX);
    key.extend_from_slice(&v.stride);
    key.push(v.offset);
    (p.file, p.storage, t.dtype, key)
}

/// Refuses tensor `t`, which views `loc`, past `expansion-ratio` times
/// its storage's bytes and `expanded-view-bytes` unless allowed; its bytes.
fn checked_expansion(t: &TensorMeta, loc: Located, options: &SourceOptions) -> Result<u64> {
    let bytes = numel(&t.shape)
        .and_then(|n| n.checked_mul(model::width(t.dtype)))
        .ok_or_else(|| bad(PyTorchError::TensorOverflow))?;
    let limits = &options.limits;
    let (factor, allowance) = (
        limits.get(Limit::ExpansionRatio),
        limits.get(Limit::ExpandedViewBytes),
    );
    if !options.torch.allow_expanded_views && !expansion_allowed(bytes, loc.len, factor, allowance)
    {
        return Err(bad(PyTorchError::ExpandedView {
            tensor_bytes: bytes,
            storage_bytes: loc.len,
            factor,
            allowance,
        }));
    }
    Ok(bytes)
}

/// Appends `more` to `all`, which ends up holding room for `total`: the
/// first list is moved, not copied (one file: no copy at all).
fn join<T>(all: &mut Vec<T>, mut more: Vec<T>, total: usize) {
    if all.is_empty() {
        *all = more;
    } else {
        all.append(&mut more);
    }
    all.reserve_exact(total.saturating_sub(all.len()));
}

/// Past this many tensors on shared storages, ties are looked for only
/// when `--dedupe-tied` asks (a model ties a few weights).
const MAX_SHARED_FOR_NOTICE: usize = 4096;

/// Groups of identical views among tensors `shared` (those whose storage
/// another tensor views too: no other can be tied), each in checkpoint
/// order. A checkpoint without shared storages builds nothing.
fn tied(
    tensors: &[TensorMeta],
    places: &[Place],
    strides: &Strides,
    shared: &[u32],
) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<TieKey, Vec<usize>> = BTreeMap::new();
    for k in shared.iter().map(|&k| k as usize) {
        let (t, p) = (&tensors[k], places[k]);
        let key = tie_key(t, p, model::stride_of(strides, k));
        groups.entry(key).or_default().push(k);
    }
    groups.into_values().filter(|g| g.len() > 1).collect()
}

impl PyTorchSource {
    /// Opens one checkpoint file (zip or legacy) of `len` bytes.
    pub(crate) fn open(file: File, len: u64, input: &str, options: &SourceOptions) -> Result<Self> {
        let part = open_part(file, len, input, options).map_err(|e| e.with_input(input))?;
        Self::from_parts(input, vec![part], options).map_err(|e| e.with_input(input))
    }

    /// Opens a `pytorch_model.bin.index.json` and every shard it names;
    /// each tensor must be in the shard the `weight_map` says.
    pub(crate) fn open_index(path: &Path, options: &SourceOptions) -> Result<Self> {
        let input = path.display().to_string();
        let index = ShardIndex::from_json_file_within(path, &options.limits)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut parts = Vec::new();
        let mut shards = Vec::new();
        for name in index.shard_names().map_err(|e| e.with_input(&input))? {
            let shard = dir.join(name);
            let shown = shard.display().to_string();
            let file = crate::index::open_regular(&shard)?;
            shards.push(crate::location::Opened::open_file(&shard, &file));
            let len = file
                .metadata()
                .map_err(|e| Error::io(e).with_input(&shown))?
                .len();
            let part = open_part(file, len, name, options).map_err(|e| e.with_input(&shown))?;
            parts.push(part);
        }
        let held = parts.iter().map(|p| {
            (
                p.name.as_str(),
                p.tree.tensors.iter().map(|t| t.name.as_str()),
            )
        });
        check_weight_map(&index, held, false).map_err(|e| e.with_input(&input))?;
        let mut src = Self::from_parts(&input, parts, options).map_err(|e| e.with_input(&input))?;
        src.shards = shards;
        Ok(src)
    }

    fn from_parts(
        input: &str,
        parts: Vec<CheckpointFile>,
        options: &SourceOptions,
    ) -> Result<Self> {
        let mut src = PyTorchSource {
            origin: None,
            listing: Listing {
                input: input.to_string(),
                tensors: Vec::new(),
                metadata: Some(Metadata::from([("format".into(), "pt".into())])),
            },
            files: Vec::with_capacity(parts.len()),
            stamps: Vec::with_capacity(parts.len()),
            shards: Vec::new(),
            placed: Vec::new(),
            strides: Vec::new(),
            skipped: 0,
            skipped_paths: Vec::new(),
            verified: Verified::default(),
            tied: Vec::new(),
            dedupe_tied: options.torch.dedupe_tied,
            under_keys: Vec::new(),
            storages: Vec::with_capacity(parts.len()),
            big_endian: Vec::with_capacity(parts.len()),
        };
        // Both lists built once at their size: one file's are moved whole.
        let count = parts.iter().map(|p| p.tree.tensors.len()).sum();
        if let [one] = parts.as_slice() {
            src.under_keys = one.tree.under_keys.clone();
        }
        // Bytes the tensors would write, and their distinct storages' bytes.
        let (mut planned, mut stored) = (0u64, 0u64);
        // Tensors whose storage another tensor views too: the only ones
        // that may be tied (few, or none).
        let mut shared: Vec<u32> = Vec::new();
        for (fi, mut part) in parts.into_iter().enumerate() {
            let mut tree = std::mem::take(&mut part.tree);
            src.skipped += tree.skipped;
            src.skipped_paths.append(&mut tree.skipped_paths);
            // Storages counted once each: a count of views a storage (up
            // to 2: shared or not), no key copied.
            let mut views = vec![0u8; part.storages.len()];
            for (t, p) in tree.tensors.iter().zip(tree.places.iter_mut()) {
                p.file = fi as u32;
                let loc = part.storages.get(p.storage).1;
                let bytes =
                    checked_expansion(t, loc, options).map_err(|e| e.with_tensor(&t.name))?;
                planned = planned.saturating_add(bytes);
                let seen = &mut views[p.storage as usize];
                if *seen == 0 {
                    stored = stored.saturating_add(loc.len);
                }
                *seen = seen.saturating_add(1).min(2);
            }
            let base = src.listing.tensors.len() as u32;
            let on_shared = tree.places.iter().map(|p| views[p.storage as usize] > 1);
            let on_shared = on_shared.enumerate().filter(|&(_, s)| s);
            shared.extend(on_shared.map(|(k, _)| base + k as u32));
            join(&mut src.listing.tensors, tree.tensors, count);
            join(&mut src.placed, tree.places, count);
            let strides = tree.strides.into_iter();
            src.strides.extend(strides.map(|(k, s)| (base + k, s)));
            src.stamps.push(super::Stamp::of(&part.file, part.len));
            src.files.push(Arc::new(part.file));
            src.storages.push((part.storages, part.data_prefix));
            src.big_endian.push(part.big_endian);
        }
        if let Some(name) = first_repeated(&src.listing.tensors) {
            return Err(Error::new(HeaderError::DuplicateTensor {
                name,
                inputs: None,
            }));
        }
        let (factor, allowance) = (
            options.limits.get(Limit::ExpansionRatio),
            options.limits.get(Limit::ExpandedFileBytes),
        );
        let allowed = expansion_allowed(planned, stored, factor, allowance);
        if !options.torch.allow_expanded_views && !allowed {
            return Err(bad(PyTorchError::Expanded {
                planned,
                factor,
                stored,
                allowance,
            }));
        }
        // Without `--dedupe-tied` the groups only feed a notice: a
        // checkpoint of many shared views gets none rather than the cost.
        if options.torch.dedupe_tied || shared.len() <= MAX_SHARED_FOR_NOTICE {
            src.tied = tied(&src.listing.tensors, &src.placed, &src.strides, &shared);
        }
        // Contiguous views are read as bytes: their strides are moot.
        let (tensors, placed) = (&src.listing.tensors, &src.placed);
        src.strides.retain(|(k, s)| {
            let k = *k as usize;
            !model::view(&tensors[k], placed[k], Some(s)).is_contiguous()
        });
        Ok(src)
    }

    /// Non-tensor values (numbers, strings, hyper-parameters) that were skipped.
    pub(crate) fn skipped(&self) -> usize {
        self.skipped
    }

    /// The top-level keys holding all of a training checkpoint's tensors
    /// (`model`, `optimizer`), each with how many: where `--pt-root` helps.
    pub(crate) fn under_keys(&self) -> &[(String, usize)] {
        &self.under_keys
    }

    /// Where the skipped values were (dotted paths; the first
    /// [`model::MAX_SKIPPED_PATHS`] of each file).
    pub(crate) fn skipped_paths(&self) -> &[String] {
        &self.skipped_paths
    }

    /// Whether tensor `k`'s storage has passed its CRC-32 check.
    fn storage_verified(&self, k: usize) -> bool {
        self.verified.passed(self.storage_key(k))
    }

    /// Tensor `k`'s storage as `verified` records it: its file and first byte.
    fn storage_key(&self, k: usize) -> StorageKey {
        (self.placed[k].file as usize, self.storage(k).start)
    }

    /// Where tensor `k`'s storage lies.
    fn storage(&self, k: usize) -> Located {
        let p = &self.placed[k];
        self.storages[p.file as usize].0.get(p.storage).1
    }

    /// The zip member holding tensor `k`'s storage, when it has a CRC-32
    /// to check (a stored member: torch never compresses storages).
    fn member(&self, k: usize) -> Option<ZipEntry> {
        let p = &self.placed[k];
        let (storages, prefix) = &self.storages[p.file as usize];
        let (key, loc) = storages.get(p.storage);
        Some(ZipEntry {
            name: format!("{prefix}{key}"),
            method: Method::Stored,
            flags: 0,
            crc32: loc.crc?,
            compressed: loc.len,
            uncompressed: loc.len,
            local_offset: 0,
        })
    }

    /// Tensor `k`'s view of its storage; a contiguous one gets C strides.
    fn view(&self, k: usize) -> View {
        model::view(&self.listing.tensors[k], self.placed[k], self.stride(k))
    }

    /// Tensor `k`'s strides, unless it is contiguous.
    fn stride(&self, k: usize) -> Option<&[u64]> {
        model::stride_of(&self.strides, k)
    }

    fn transform(&self, k: usize) -> Transform {
        let big = self.big_endian[self.placed[k].file as usize];
        Transform::to_little_endian(self.listing.tensors[k].dtype, big)
    }

    /// Tensor `k`'s first byte in its file and its length.
    fn span(&self, k: usize) -> (u64, u64) {
        let t = &self.listing.tensors[k];
        let w = model::width(t.dtype);
        let len = numel(&t.shape).unwrap_or(0) * w;
        (self.storage(k).start + self.placed[k].offset * w, len)
    }

    /// Whether tensor `k` is its whole storage as it lies: contiguous, every
    /// byte of it. Its bytes are then the member's, checked by its CRC-32 as
    /// they are read; any other view needs the storage checked first.
    fn whole_storage(&self, k: usize) -> bool {
        let storage = self.storage(k);
        self.stride(k).is_none() && self.span(k) == (storage.start, storage.len)
    }
}

impl Source for PyTorchSource {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn identity(&self) -> Option<String> {
        super::identities(&self.stamps)
    }

    fn opened(&self) -> Vec<crate::location::Opened> {
        self.origin.iter().chain(&self.shards).cloned().collect()
    }

    fn tied_groups(&self) -> Vec<Vec<usize>> {
        match self.dedupe_tied {
            true => self.tied.clone(),
            false => Vec::new(),
        }
    }

    fn tied_views(&self) -> Vec<Vec<usize>> {
        self.tied.clone()
    }

    fn check_unchanged(&self) -> Result<()> {
        super::all_unchanged(&self.files, &self.stamps, &self.listing.input)
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        if self.stride(k).is_some() {
            return None;
        }
        let (offset, len) = self.span(k);
        let storage = self.storage(k);
        // A storage's CRC can be checked only when the tensor is all of it;
        // a part of one is read through `open_blocking`, which checks it all
        // first, until the storage has passed: then its parts are plain spans
        // (the copy engine takes them in windows, so of a million views of
        // one storage only the first window is read one by one).
        let whole = self.whole_storage(k);
        if storage.crc.is_some() && !whole && !self.storage_verified(k) {
            return None;
        }
        Some(FileSpan {
            file: self.files[self.placed[k].file as usize].clone(),
            offset,
            len,
            transform: self.transform(k),
            crc: storage.crc.filter(|_| whole).map(|expected| CrcCheck {
                expected,
                from: storage.start,
            }),
        })
    }

    /// A view that is not a whole storage as it lies: a part of one, or
    /// strided. Its storage's CRC-32, if it has one, is checked first (once):
    /// a part is read past the member's check, a gather reads it out of order.
    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        if self.whole_storage(k) {
            return None;
        }
        let (storage, (offset, len)) = (self.storage(k), self.span(k));
        let view = self.stride(k).map(|_| self.view(k));
        let file = self.files[self.placed[k].file as usize].clone();
        // A storage already passed needs no check, nor its member's name.
        let unchecked = !self.storage_verified(k);
        let check = self.member(k).filter(|_| unchecked).map(|entry| {
            let verified = self.verified.clone();
            (verified, self.storage_key(k), entry)
        });
        let transform = self.transform(k);
        Some(Box::new(move || {
            if let Some((verified, key, entry)) = check {
                verified.check(key, &file, &entry, storage.start)?;
            }
            let r: BlockingRead = match view {
                Some(view) => Box::new(StridedReader::new(file.try_clone()?, storage.start, &view)),
                None => Box::new(PositionalReader::new(file, offset, len)),
            };
            Ok((r, transform))
        }))
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        async move {
            if let Some(open) = self.open_blocking(k) {
                let opened = tokio::task::spawn_blocking(open).await;
                let (r, transform) = opened.map_err(std::io::Error::other)??;
                return Ok(TensorData::new(BlockingReader::new(r)).with_transform(transform));
            }
            // The whole storage, as it lies: its CRC-32 checked as it is read.
            let file = &self.files[self.placed[k].file as usize];
            let storage = self.storage(k);
            let data = match self.member(k) {
                Some(entry) => {
                    let r = MemberReader::new(file.try_clone()?, &entry, storage.start, 0)?;
                    TensorData::new(BlockingReader::new(r))
                }
                None => TensorData::new(file_range(file, storage.start, storage.len).await?),
            };
            Ok(data.with_transform(self.transform(k)))
        }
        .boxed()
    }
}

/// Storages (file, first byte) whose whole member passed its CRC-32, shared
/// with the readers that check them on the worker pool. Each storage has a
/// cell of its own, locked while it is checked: views of one storage read
/// side by side check it once, while other storages are checked, or read,
/// at the same time, and asking whether one has passed never waits.
#[derive(Debug, Default, Clone)]
struct Verified(Arc<Mutex<HashMap<StorageKey, Arc<Mutex<bool>>>>>);

/// A storage: its file's index and its first byte.
type StorageKey = (usize, u64);

impl Verified {
    /// The cell of storage `key`, made on first asking.
    fn cell(&self, key: StorageKey) -> Arc<Mutex<bool>> {
        let mut cells = self.0.lock().unwrap_or_else(|e| e.into_inner());
        cells.entry(key).or_default().clone()
    }

    /// Whether storage `key` has passed (`false` while it is being checked);
    /// asking makes no cell.
    fn passed(&self, key: StorageKey) -> bool {
        let cells = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let cell = cells.get(&key);
        cell.is_some_and(|c| matches!(c.try_lock().as_deref(), Ok(true)))
    }

    /// Checks the CRC-32 of the member `entry` at `start` in `file` in one
    /// forward pass, unless storage `key` has passed already. A check that
    /// fails is not remembered: a reader of the same storage waiting for it
    /// checks again and fails alike (one more pass, on the way to an error).
    fn check(&self, key: StorageKey, file: &File, entry: &ZipEntry, start: u64) -> Result<()> {
        let cell = self.cell(key);
        let mut passed = cell.lock().unwrap_or_else(|e| e.into_inner());
        if !*passed {
            let mut r = MemberReader::new(file, entry, start, 0)?;
            std::io::copy(&mut r, &mut std::io::sink()).map_err(Error::io)?;
            *passed = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ZipError;

    /// A storage is checked once, whatever asks; another file's storage at
    /// the same first byte is checked on its own; a failed check does not pass.
    #[test]
    fn each_storage_is_checked_once() {
        use std::io::Write;
        let bytes = b"a storage";
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        let entry = |crc32| ZipEntry {
            name: "archive/data/0".into(),
            method: Method::Stored,
            flags: 0,
            crc32,
            compressed: bytes.len() as u64,
            uncompressed: bytes.len() as u64,
            local_offset: 0,
        };
        let good = entry(crc32fast::hash(bytes));
        let v = Verified::default();
        assert!(!v.passed((0, 0)));
        v.check((0, 0), &file, &good, 0).unwrap();
        assert!(v.passed((0, 0)));
        // Nothing is read again: the bytes are gone, and it still passes.
        file.set_len(0).unwrap();
        v.check((0, 0), &file, &good, 0).unwrap();
        assert!(v.check((1, 0), &file, &good, 0).is_err(), "another file's");
        assert!(!v.passed((1, 0)));

        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        let e = v.check((2, 0), &file, &entry(1), 0).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Zip(ZipError::CrcMismatch { .. })),
            "{e}"
        );
        assert!(!v.passed((2, 0)));
        v.check((2, 0), &file, &good, 0).unwrap();
    }

    fn at(start: u64, crc: Option<u32>) -> Located {
        Located {
            start,
            len: start + 1,
            crc,
        }
    }

    #[test]
    fn storages_find_every_key_and_its_place() {
        let keys = ["10", "2", "", "1", "data/x", "ü"];
        let list = keys
            .iter()
            .zip(0..)
            .map(|(k, i)| ((*k).into(), at(i, (i % 2 == 1).then_some(i as u32))))
            .collect();
        let table = Storages::new(list).unwrap();
        assert_eq!(table.len(), keys.len());
        for (k, i) in keys.iter().zip(0..) {
            let (index, place) = table.find(k).unwrap();
            assert_eq!(table.get(index).0, *k);
            assert_eq!((place.start, place.len), (i, i + 1));
            assert_eq!(place.crc, (i % 2 == 1).then_some(i as u32));
        }
        for absent in ["0", "100", "data", "z"] {
            assert!(table.find(absent).is_none(), "{absent}");
        }
        let sorted: Vec<&str> = (0..keys.len() as u32).map(|i| table.get(i).0).collect();
        assert_eq!(sorted, ["", "1", "10", "2", "data/x", "ü"]);
    }

    #[test]
    fn storages_refuse_a_key_listed_twice() {
        let list = vec![("7".into(), at(0, None)), ("7".into(), at(1, None))];
        let e = Storages::new(list).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::PyTorch(PyTorchError::ListedTwice(k)) if k == "7"));
    }
}
