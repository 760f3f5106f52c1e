//! Chunked datasets read in row-major order, in bounded memory.
//!
//! The chunks are listed when the file is opened (their B-tree walked,
//! every record checked against the dataset and the file). Reading then
//! goes one row of chunks at a time: the chunks whose first index is the
//! row's are read, decoded ([`super::filters`]) and copied into a buffer
//! of that many whole rows of the dataset, which is then served in order.
//! Memory is that buffer and one chunk: a row of chunks is refused at
//! open if over the caller's `hdf5-chunk-row-bytes` limit (64 MiB). Chunks never written read as the fill value.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::bt2index::btree2_chunks;
use super::btree::{key_fields, leaves};
use super::dataset::{Chunk, ChunkIndex, ChunkShape, Filter};
use super::earray::extensible_array_chunks;
use super::error::Hdf5Error;
use super::farray::{chunk_grid, fixed_array_chunks, grid_offsets};
use super::filters::decode;
use super::read::{bad, malformed, Geometry};
use crate::limits::{Limit, Limits};
use crate::{Error, Result};

/// A chunked dataset: what reading it needs.
#[derive(Debug, Clone)]
pub(crate) struct Chunked {
    pub(crate) shape: Vec<u64>,
    pub(crate) chunk: Vec<u64>,
    pub(crate) width: usize,
    pub(crate) filters: Vec<Filter>,
    pub(crate) fill: Vec<u8>,
    /// Sorted by offsets.
    pub(crate) chunks: Arc<Vec<Chunk>>,
}

/// Lists the chunks of a dataset of `shape` (at most `max_shape`) in
/// chunks of `chunk`.
pub(crate) fn list_chunks(
    geo: Geometry<'_>,
    index: ChunkIndex,
    shape: &[u64],
    max_shape: &[u64],
    chunk: &[u64],
    width: usize,
    limits: &Limits,
) -> Result<Vec<Chunk>> {
    let logical = chunk_bytes(chunk, width);
    let s = ChunkShape {
        max_shape,
        chunk,
        logical,
    };
    // A newer index's chunks, those inside the shape.
    let newer =
        |read: NewerIndex, header| inside_shape(geo, read(geo, header, &s)?, shape, logical);
    let mut out = Vec::new();
    match index {
        ChunkIndex::Single { addr, size, mask } => {
            if !geo.undefined(addr) {
                let size = size.unwrap_or(logical);
                let offsets = vec![0; shape.len()];
                let c = Chunk {
                    offsets,
                    addr,
                    size,
                    mask,
                };
                out.push(checked(geo, c, logical, addr)?);
            }
        }
        // Never written: all fill value.
        ChunkIndex::FixedArray(header)
        | ChunkIndex::ExtensibleArray(header)
        | ChunkIndex::Btree2(header)
        | ChunkIndex::Implicit(header)
            if geo.undefined(header) => {}
        ChunkIndex::FixedArray(header) => out = newer(fixed_array_chunks, header)?,
        ChunkIndex::ExtensibleArray(header) => out = newer(extensible_array_chunks, header)?,
        ChunkIndex::Btree2(header) => out = newer(btree2_chunks, header)?,
        ChunkIndex::Implicit(first) => out = newer(implicit_chunks, first)?,
        ChunkIndex::BTree(root) if geo.undefined(root) => {}
        ChunkIndex::BTree(root) => {
            let key = 8 + 8 * (shape.len() + 1);
            for leaf in leaves(geo, root, 1, key)? {
                let mut k = key_fields(geo, &leaf);
                let size = u64::from(k.u32()?);
                let mask = k.u32()?;
                let offsets: Vec<u64> =
                    (0..shape.len()).map(|_| k.uint(8)).collect::<Result<_>>()?;
                let at = leaf.key_at;
                for ((&o, &c), &s) in offsets.iter().zip(chunk).zip(shape) {
                    if o % c != 0 || (o >= s && s > 0) {
                        let e = format!(
                            "a chunk at {offsets:?} in a {shape:?} dataset of {chunk:?} chunks"
                        );
                        return Err(malformed(e, at));
                    }
                }
                let c = Chunk {
                    offsets,
                    addr: leaf.child,
                    size,
                    mask,
                };
                out.push(checked(geo, c, logical, at)?);
            }
        }
    }
    out.sort_by(|a, b| a.offsets.cmp(&b.offsets));
    if let Some(w) = out.windows(2).find(|w| w[0].offsets == w[1].offsets) {
        let e = format!("two chunks at {:?}", w[0].offsets);
        return Err(malformed(e, w[1].addr));
    }
    let row = row_bytes(shape, chunk, width);
    if row > limits.get(Limit::Hdf5ChunkRowBytes) {
        let what = format!("a row of chunks takes {row} bytes to stream in order");
        return Err(limits.refuse(Limit::Hdf5ChunkRowBytes, what));
    }
    Ok(out)
}

/// The chunks of a newer index inside `shape`, each checked against its
/// logical size and the file. A chunk past the shape (written before the
/// dataset shrank) is not the dataset's: h5py does not read it either.
fn inside_shape(
    geo: Geometry<'_>,
    listed: Vec<Chunk>,
    shape: &[u64],
    logical: u64,
) -> Result<Vec<Chunk>> {
    let mut out = Vec::new();
    for c in listed {
        if c.offsets.iter().zip(shape).any(|(&o, &s)| o >= s) {
            continue;
        }
        let at = c.addr;
        out.push(checked(geo, c, logical, at)?);
    }
    Ok(out)
}

/// The chunks of a dataset without a chunk index (type 2, "implicit":
/// what libhdf5 writes under `libver="v110"`/`"latest"` for space allocated
/// early, `H5D_ALLOC_TIME_EARLY`, without filters): every chunk of the
/// grid over the maximum shape, row-major, one after another from
/// `first`. Their count is bounded by the file, which must hold them all.
fn implicit_chunks(geo: Geometry<'_>, first: u64, s: &ChunkShape<'_>) -> Result<Vec<Chunk>> {
    let grid = chunk_grid(s.max_shape, s.chunk);
    let count = grid.iter().try_fold(1u64, |a, &g| a.checked_mul(g));
    let total = count.and_then(|n| n.checked_mul(s.logical));
    let (Some(count), Some(total)) = (count, total) else {
        let e = format!("a grid of {grid:?} chunks of {} bytes", s.logical);
        return Err(malformed(e, first));
    };
    geo.check("a dataset's chunks, stored in a row", first, total)?;
    // No index means no bytes that bound the listing: a chunk of one byte
    // is an entry of some 60. Charged to the listing's budget (8 times the
    // file plus 64 MiB) as if read, as every other index's entries are.
    let entry = (std::mem::size_of::<Chunk>() + 8 * s.chunk.len()) as u64;
    let listing = count.saturating_mul(entry);
    if geo.budget.charge(listing, first).is_err() {
        let e = format!(
            "{count} chunks of {} bytes without an index (the listing would hold \
             {entry} bytes a chunk, over 8 times the file plus 64 MiB)",
            s.logical
        );
        return Err(bad(Hdf5Error::Unsupported(e), first));
    }
    let chunk = |i: u64| Chunk {
        offsets: grid_offsets(i, &grid, s.chunk),
        addr: first + i * s.logical,
        size: s.logical,
        mask: 0,
    };
    Ok((0..count).map(chunk).collect())
}

/// How a newer chunk index (fixed array, extensible array, version 2
/// B-tree) is listed from its header.
type NewerIndex = fn(Geometry<'_>, u64, &ChunkShape<'_>) -> Result<Vec<Chunk>>;

/// `c`, once its stored size is one its filters can make (checked at `at`)
/// and its bytes lie inside the file.
fn checked(geo: Geometry<'_>, c: Chunk, logical: u64, at: u64) -> Result<Chunk> {
    check_size(c.size, logical, at)?;
    geo.check("a chunk", c.addr, c.size)?;
    Ok(c)
}

/// Checks a stored chunk is no larger than its filters can make it:
/// deflate grows what it cannot compress by a little, fletcher32 adds 4.
fn check_size(size: u64, logical: u64, at: u64) -> Result<()> {
    let most = logical.saturating_add(logical / 64).saturating_add(4096);
    if size > most {
        let e = format!("a chunk of {size} bytes for {logical} bytes of data");
        return Err(malformed(e, at));
    }
    Ok(())
}

/// A chunk's logical bytes (saturating: checked against the limit).
pub(crate) fn chunk_bytes(chunk: &[u64], width: usize) -> u64 {
    chunk.iter().fold(width as u64, |a, &d| a.saturating_mul(d))
}

/// The bytes of one row of chunks: `chunk[0]` rows of the dataset, plus
/// one chunk being decoded.
fn row_bytes(shape: &[u64], chunk: &[u64], width: usize) -> u64 {
    let rest = shape[1..]
        .iter()
        .fold(width as u64, |a, &d| a.saturating_mul(d));
    rest.saturating_mul(chunk[0].min(shape[0]))
        .saturating_add(chunk_bytes(chunk, width))
}

/// Reads a chunked dataset's bytes in row-major order.
pub(crate) struct ChunkedReader {
    file: Arc<File>,
    d: Chunked,
    /// The input and the tensor, for errors.
    input: String,
    name: String,
    /// The first dataset row of the next row of chunks.
    next_row: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl ChunkedReader {
    pub(crate) fn new(file: Arc<File>, d: Chunked, input: &str, name: &str) -> Self {
        ChunkedReader {
            file,
            d,
            input: input.to_string(),
            name: name.to_string(),
            next_row: 0,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Decodes the next row of chunks into `buf`.
    fn refill(&mut self) -> Result<()> {
        let d = &self.d;
        let start = self.next_row;
        let rows = d.chunk[0].min(d.shape[0] - start);
        let row_len = d.shape[1..].iter().product::<u64>() as usize * d.width;
        let len = rows as usize * row_len;
        fill(&mut self.buf, &d.fill, len);
        let first = d.chunks.partition_point(|c| c.offsets[0] < start);
        let logical = chunk_bytes(&d.chunk, d.width) as usize;
        let mut raw = Vec::new();
        for c in d.chunks[first..]
            .iter()
            .take_while(|c| c.offsets[0] == start)
        {
            raw.resize(c.size as usize, 0);
            self.file.read_exact_at(&mut raw, c.addr)?;
            let data = decode(&raw, &d.filters, c.mask, logical)
                .map_err(|e| chunk_error(e, c, logical))?;
            place(&mut self.buf, &data, c, d, start);
        }
        self.next_row = start + rows;
        self.pos = 0;
        Ok(())
    }
}

/// Sets `buf` to `len` bytes (a multiple of the element's) of the fill
/// value `element`: zeros at memset speed, any other value by doubling
/// what is there (an element at a time cost a twelfth of a chunked file's
/// conversion time).
fn fill(buf: &mut Vec<u8>, element: &[u8], len: usize) {
    buf.clear();
    if element.iter().all(|&b| b == 0) || element.is_empty() {
        buf.resize(len, 0);
        return;
    }
    buf.reserve(len);
    buf.extend_from_slice(&element[..element.len().min(len)]);
    while buf.len() < len {
        let n = buf.len().min(len - buf.len());
        buf.extend_from_within(..n);
    }
}

fn chunk_error(e: super::filters::DecodeError, c: &Chunk, logical: usize) -> Error {
    use super::filters::DecodeError as D;
    let offsets = c.offsets.clone();
    let kind = match e {
        D::Length(actual) => Hdf5Error::ChunkLength {
            offsets,
            expected: logical as u64,
            actual,
        },
        D::Inflate(detail) => Hdf5Error::Inflate { offsets, detail },
    };
    bad(kind, c.addr)
}

/// Copies chunk `c`'s `data` into `buf`, which holds the dataset's rows
/// from `start`: every run along the last axis, clipped to the dataset.
fn place(buf: &mut [u8], data: &[u8], c: &Chunk, d: &Chunked, start: u64) {
    let n = d.shape.len();
    let w = d.width as u64;
    // Extents of the chunk inside the dataset.
    let ext: Vec<u64> = (0..n)
        .map(|i| d.chunk[i].min(d.shape[i] - c.offsets[i]))
        .collect();
    if ext.contains(&0) {
        return;
    }
    // Strides (in elements) of the dataset's rows in buf, and of the chunk.
    let mut dstride = vec![1u64; n];
    let mut cstride = vec![1u64; n];
    for i in (0..n - 1).rev() {
        dstride[i] = dstride[i + 1] * d.shape[i + 1];
        cstride[i] = cstride[i + 1] * d.chunk[i + 1];
    }
    let run = (ext[n - 1] * w) as usize;
    let mut idx = vec![0u64; n - 1];
    loop {
        let mut src = 0u64;
        // A 1-d dataset's only axis is also the rows' axis: buf starts at `start`.
        let last = if n == 1 {
            c.offsets[0] - start
        } else {
            c.offsets[n - 1]
        };
        let mut dst = last * w;
        for i in 0..n - 1 {
            src += idx[i] * cstride[i];
            let at = if i == 0 {
                c.offsets[0] - start + idx[0]
            } else {
                c.offsets[i] + idx[i]
            };
            dst += at * dstride[i] * w;
        }
        let src = (src * w) as usize;
        let dst = dst as usize;
        buf[dst..dst + run].copy_from_slice(&data[src..src + run]);
        // The next index over the leading axes, last fastest.
        let mut i = n - 1;
        loop {
            if i == 0 {
                return;
            }
            i -= 1;
            idx[i] += 1;
            if idx[i] < ext[i] {
                break;
            }
            idx[i] = 0;
        }
    }
}

impl Read for ChunkedReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.buf.len() {
            if self.next_row >= self.d.shape[0] || self.d.shape.contains(&0) {
                return Ok(0);
            }
            self.refill().map_err(|e| {
                e.with_tensor(self.name.as_str())
                    .with_input(&self.input)
                    .into_io()
            })?;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn chunks_without_an_index_are_listed_within_the_listing_budget() {
        use super::super::read::ReadBudget;
        use super::{implicit_chunks, ChunkShape, Geometry};
        let file = tempfile::tempfile().unwrap();
        // A file of one-byte chunks: 4,096 are listed, 2 M would make the
        // listing hold ~120 MB, over 8 times the file plus 64 MiB.
        for (len, listed) in [(4096u64, true), (2 << 20, false)] {
            file.set_len(len).unwrap();
            let budget = ReadBudget::for_file(len);
            let geo = Geometry {
                file: &file,
                len,
                offset_size: 8,
                length_size: 8,
                budget: &budget,
            };
            let max_shape = [len];
            let shape = ChunkShape {
                max_shape: &max_shape,
                chunk: &[1],
                logical: 1,
            };
            match implicit_chunks(geo, 0, &shape) {
                Ok(chunks) => assert!(listed && chunks.len() as u64 == len),
                Err(e) => assert!(!listed && e.to_string().contains("without an index"), "{e}"),
            }
        }
    }

    #[test]
    fn fill_repeats_the_element_to_exactly_the_length() {
        let mut buf = vec![1, 2, 3];
        fill(&mut buf, &[0, 0, 0, 0], 12);
        assert_eq!(buf, [0; 12]);
        for len in [0, 4, 8, 12, 28, 4096] {
            fill(&mut buf, &[7, 0, 0, 0], len);
            let want: Vec<u8> = [7u8, 0, 0, 0].iter().copied().cycle().take(len).collect();
            assert_eq!(buf, want, "{len}");
        }
    }
}
