//! Fortran-order (column-major) data read back in C order, in bounded memory.
//!
//! In the file the first axis varies fastest; the output wants the last
//! axis fastest. Both are views of one index space, so the array is cut
//! into tiles, boxes of that space of at most [`TILE_BYTES`]: a tile is
//! read with positional reads of runs that lie together in the file (the
//! leading axes it covers whole, then part of the next), reordered in
//! memory, and lands in the output as runs that lie together there (the
//! trailing axes it covers whole, then part of the one before).
//!
//! When a tile covers every axis but the first in full (rows of the first
//! axis are short), consecutive tiles are consecutive output: they are
//! served straight from memory. Otherwise (a long row, say a 2 x 2^26
//! array) a tile's output is scattered: every tile is written to its
//! place in an anonymous temp file (disk, never memory), which is then
//! read in order. Either way memory is two tile buffers, whatever the
//! shape, and every read and write moves a run of at least [`MIN_RUN`]
//! bytes (or a whole axis), never one element.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Bytes of one tile: the reader holds two (as read, and reordered).
#[cfg(not(test))]
pub(crate) const TILE_BYTES: usize = 4 << 20;
#[cfg(test)]
pub(crate) const TILE_BYTES: usize = 4096;

/// Shortest run worth one positional read or write; tiles served straight
/// from memory must read runs at least this long.
#[cfg(not(test))]
pub(crate) const MIN_RUN: u64 = 4096;
#[cfg(test)]
pub(crate) const MIN_RUN: u64 = 64;

/// Axes of length 1 change nothing in either order; dropping them leaves
/// fewer, larger runs.
fn squeeze(shape: &[u64]) -> Vec<u64> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// True when Fortran and C order hold the same bytes (at most one axis longer than 1).
pub(crate) fn same_as_c_order(shape: &[u64]) -> bool {
    squeeze(shape).len() <= 1 || shape.contains(&0)
}

/// The extents of a tile for `dims` (squeezed, not empty) of `width`-byte
/// elements, and whether tiles are served straight from memory (every axis
/// but the first covered whole).
fn tile_for(dims: &[u64], width: u64) -> (Vec<u64>, bool) {
    let n = dims.len();
    let budget = (TILE_BYTES as u64 / width.max(1)).max(1);
    let rest = dims[1..].iter().fold(1u64, |a, &d| a.saturating_mul(d));
    // Whole rows of the first axis, when enough fit for long reads.
    if rest <= budget {
        let h = (budget / rest).min(dims[0]);
        if h == dims[0] || h.saturating_mul(width) >= MIN_RUN {
            let mut ext = dims.to_vec();
            ext[0] = h;
            return (ext, true);
        }
    }
    // Leading axes for the reads, about the square root of the budget...
    let side = budget.isqrt().max(1);
    let mut ext = vec![1u64; n];
    let mut prod = 1u64;
    let mut j = 0;
    while j < n {
        if prod.saturating_mul(dims[j]) <= side {
            ext[j] = dims[j];
            prod *= dims[j];
            j += 1;
        } else {
            ext[j] = (side / prod).max(1);
            prod *= ext[j];
            break;
        }
    }
    if j < n {
        // ...then trailing axes for the writes, with the rest of it.
        let mut k = n - 1;
        loop {
            if k == j {
                let others = prod / ext[j];
                ext[j] = (budget / others).clamp(ext[j], dims[j]);
                break;
            }
            if prod.saturating_mul(dims[k]) <= budget {
                ext[k] = dims[k];
                prod *= dims[k];
                k -= 1;
            } else {
                ext[k] = (budget / prod).max(1);
                break;
            }
        }
    }
    let direct = ext[1..] == dims[1..];
    (ext, direct)
}

/// Copies `dst.len() / w` elements of `w` bytes from `src`, element
/// `start + k * stride` to element `k`. Inlined into [`gather_any`]'s arms
/// with `w` a constant, so each common width gets its own fixed-size copy.
#[inline(always)]
fn gather(w: usize, src: &[u8], start: usize, stride: usize, dst: &mut [u8]) {
    for (k, d) in dst.chunks_exact_mut(w).enumerate() {
        let s = (start + k * stride) * w;
        d.copy_from_slice(&src[s..s + w]);
    }
}

fn gather_any(w: usize, src: &[u8], start: usize, stride: usize, dst: &mut [u8]) {
    match w {
        1 => gather(1, src, start, stride, dst),
        2 => gather(2, src, start, stride, dst),
        4 => gather(4, src, start, stride, dst),
        8 => gather(8, src, start, stride, dst),
        16 => gather(16, src, start, stride, dst),
        _ => gather(w, src, start, stride, dst),
    }
}

/// Steps `idx` (each `idx[k] < lim[k]`) over `axes` in the given order,
/// the first fastest; false once every index has wrapped.
fn step(idx: &mut [u64], lim: &[u64], axes: impl Iterator<Item = usize>) -> bool {
    for k in axes {
        idx[k] += 1;
        if idx[k] < lim[k] {
            return true;
        }
        idx[k] = 0;
    }
    false
}

/// Reads a Fortran-order array's data from `file` at `base`, yielding C order.
pub struct FortranReader {
    file: File,
    base: u64,
    width: usize,
    dims: Vec<u64>,
    /// F-order and C-order strides of `dims`, in elements.
    f_strides: Vec<u64>,
    c_strides: Vec<u64>,
    /// A tile's extents; tiles start at multiples of them.
    ext: Vec<u64>,
    /// Tiles are consecutive output (served from `tile_c`), else spooled.
    direct: bool,
    /// The next tile's index in the grid of tiles (F order); None when done.
    next: Option<Vec<u64>>,
    grid: Vec<u64>,
    /// A tile as read (F order) and reordered (C order).
    tile_f: Vec<u8>,
    tile_c: Vec<u8>,
    /// Bytes of `tile_c` already returned.
    pos: usize,
    /// The whole output, in order, once every tile is placed (long rows).
    spool: Option<File>,
    spool_pos: u64,
    total: u64,
}

impl FortranReader {
    /// The caller has checked the data's length.
    pub fn new(file: File, base: u64, shape: &[u64], width: usize) -> Self {
        let mut dims = squeeze(shape);
        if shape.contains(&0) {
            dims = vec![0];
        } else if dims.is_empty() {
            dims = vec![1];
        }
        let n = dims.len();
        let total = dims.iter().fold(1u64, |a, &d| a.saturating_mul(d));
        let mut f_strides = vec![1u64; n];
        let mut c_strides = vec![1u64; n];
        for k in 1..n {
            f_strides[k] = f_strides[k - 1].saturating_mul(dims[k - 1]);
            c_strides[n - 1 - k] = c_strides[n - k].saturating_mul(dims[n - k]);
        }
        let (ext, direct) = if total == 0 {
            (vec![1; n], true)
        } else {
            tile_for(&dims, width as u64)
        };
        let grid = dims.iter().zip(&ext).map(|(d, e)| d.div_ceil(*e)).collect();
        FortranReader {
            file,
            base,
            width,
            next: (total > 0).then(|| vec![0; n]),
            grid,
            f_strides,
            c_strides,
            ext,
            direct,
            tile_f: Vec::new(),
            tile_c: Vec::new(),
            pos: 0,
            spool: None,
            spool_pos: 0,
            total: total.saturating_mul(width as u64),
            dims,
        }
    }

    /// Reads the next tile into `tile_c`, in C order; returns its origin
    /// and extents, or None when every tile is done.
    fn load_tile(&mut self) -> io::Result<Option<(Vec<u64>, Vec<u64>)>> {
        let Some(t) = self.next.take() else {
            return Ok(None);
        };
        let n = self.dims.len();
        let w = self.width as u64;
        let origin: Vec<u64> = t.iter().zip(&self.ext).map(|(i, e)| i * e).collect();
        let x: Vec<u64> = (0..n)
            .map(|k| self.ext[k].min(self.dims[k] - origin[k]))
            .collect();
        let mut nt = t;
        if step(&mut nt, &self.grid, 0..n) {
            self.next = Some(nt);
        }
        let elems: u64 = x.iter().product();
        let bytes = (elems * w) as usize;

        // Runs in the file: the leading axes the tile covers whole, then
        // the first one it does not.
        let m = (0..n).find(|&k| x[k] < self.dims[k]).unwrap_or(n - 1);
        let run: u64 = x[..=m].iter().product();
        self.tile_f.resize(bytes, 0);
        let mut idx = vec![0u64; n];
        for chunk in self.tile_f.chunks_exact_mut((run * w) as usize) {
            let at: u64 = (0..n)
                .map(|k| (origin[k] + idx[k]) * self.f_strides[k])
                .sum();
            self.file.read_exact_at(chunk, self.base + at * w)?;
            step(&mut idx, &x, m + 1..n);
        }

        // Reorder: C order of the tile, the last axis in rows.
        let mut tf = vec![1u64; n];
        for k in 1..n {
            tf[k] = tf[k - 1] * x[k - 1];
        }
        self.tile_c.resize(bytes, 0);
        let last = x[n - 1] as usize;
        let mut idx = vec![0u64; n];
        for row in self.tile_c.chunks_exact_mut(last * self.width) {
            let start: u64 = (0..n - 1).map(|k| idx[k] * tf[k]).sum();
            gather_any(
                self.width,
                &self.tile_f,
                start as usize,
                tf[n - 1] as usize,
                row,
            );
            step(&mut idx, &x, (0..n - 1).rev());
        }
        Ok(Some((origin, x)))
    }

    /// Places every tile in a temp file at its output offset.
    fn spool_all(&mut self) -> io::Result<File> {
        let tmp = tempfile::tempfile()?;
        let n = self.dims.len();
        let w = self.width as u64;
        while let Some((origin, x)) = self.load_tile()? {
            // Runs in the output: the trailing axes the tile covers whole,
            // then the last one it does not.
            let m = (0..n).rev().find(|&k| x[k] < self.dims[k]).unwrap_or(0);
            let run: u64 = x[m..].iter().product();
            let mut idx = vec![0u64; n];
            for chunk in self.tile_c.chunks_exact((run * w) as usize) {
                let at: u64 = (0..n)
                    .map(|k| (origin[k] + idx[k]) * self.c_strides[k])
                    .sum();
                tmp.write_all_at(chunk, at * w)?;
                step(&mut idx, &x, (0..m).rev());
            }
        }
        self.tile_f = Vec::new();
        self.tile_c = Vec::new();
        Ok(tmp)
    }
}

impl Read for FortranReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.direct {
            if self.pos == self.tile_c.len() {
                if self.load_tile()?.is_none() {
                    self.tile_f = Vec::new();
                    self.tile_c = Vec::new();
                    self.pos = 0;
                    return Ok(0);
                }
                self.pos = 0;
            }
            let k = (self.tile_c.len() - self.pos).min(out.len());
            out[..k].copy_from_slice(&self.tile_c[self.pos..self.pos + k]);
            self.pos += k;
            return Ok(k);
        }
        if self.spool.is_none() {
            self.spool = Some(self.spool_all()?);
        }
        let spool = self.spool.as_ref().expect("spooled above");
        let left = self.total - self.spool_pos;
        let k = (left.min(out.len() as u64)) as usize;
        if k == 0 {
            return Ok(0);
        }
        spool.read_exact_at(&mut out[..k], self.spool_pos)?;
        self.spool_pos += k as u64;
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Lays out `c_order` values (shape `shape`) in Fortran order, reads them back.
    fn roundtrip(shape: &[u64], chunk: usize) -> (Vec<u32>, Vec<u32>) {
        let n: u64 = shape.iter().product();
        let c_vals: Vec<u32> = (0..n as u32).collect();
        // F-order position of C index: reverse the axes.
        let mut f_vals = vec![0u32; n as usize];
        for (ci, v) in c_vals.iter().enumerate() {
            let mut rem = ci as u64;
            let mut idx = vec![0u64; shape.len()];
            for k in (0..shape.len()).rev() {
                idx[k] = rem % shape[k];
                rem /= shape[k];
            }
            let mut fi = 0u64;
            for k in (0..shape.len()).rev() {
                fi = fi * shape[k] + idx[k];
            }
            f_vals[fi as usize] = *v;
        }
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"prefix").unwrap();
        let bytes: Vec<u8> = f_vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        file.write_all(&bytes).unwrap();
        let mut r = FortranReader::new(file, 6, shape, 4);
        let mut bytes = Vec::new();
        let mut buf = vec![0u8; chunk];
        loop {
            let k = r.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..k]);
        }
        let got = bytes
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (got, c_vals)
    }

    #[test]
    fn two_and_three_dims() {
        for shape in [
            &[3u64, 5][..],
            &[2, 3, 4],
            &[4, 1, 3],
            &[1, 7],
            &[5, 2, 1, 3],
        ] {
            for chunk in [1, 3, 4, 64, 4096] {
                let (got, want) = roundtrip(shape, chunk);
                assert_eq!(got, want, "shape {shape:?} chunk {chunk}");
            }
        }
    }

    #[test]
    fn tiles_smaller_than_the_array() {
        // Tiles here are 4 KiB (1024 u32), runs at least 64 bytes. Odd
        // shapes, so that edge tiles are partial on every axis.
        for shape in [
            &[300, 7][..],    // short rows: several rows a tile, from memory
            &[7, 300],        // short columns
            &[2, 5001],       // a long row: whole columns, spooled
            &[3, 4099],       // a row over a tile by a few elements
            &[1025, 3],       // a column over a tile
            &[97, 101],       // both axes over the square root of a tile
            &[2000, 1001],    // neither fits a tile
            &[3, 5, 7, 11],   // ranks above 2
            &[2, 3, 1, 701],  // long trailing axis
            &[701, 3, 2],     // long leading axis
            &[33, 37, 41],    // every axis partial in some tile
            &[5, 1, 1, 4097], // squeezed to a long row
        ] {
            for chunk in [7, 4096, 1 << 20] {
                let (got, want) = roundtrip(shape, chunk);
                assert!(got == want, "shape {shape:?} chunk {chunk}");
            }
        }
    }

    #[test]
    fn every_width() {
        for width in [1usize, 2, 3, 8, 16] {
            for shape in [&[2u64, 3001][..], &[61, 67], &[3, 5, 307]] {
                let n: u64 = shape.iter().product();
                let elem = |ci: u64| -> Vec<u8> {
                    (0..width as u64)
                        .map(|b| ((ci * 131 + b * 7) % 251) as u8)
                        .collect()
                };
                let mut stored = vec![0u8; n as usize * width];
                let mut want = Vec::new();
                for ci in 0..n {
                    let (mut rem, mut fi, mut scale) = (ci, 0u64, 1u64);
                    let mut idx = vec![0u64; shape.len()];
                    for k in (0..shape.len()).rev() {
                        idx[k] = rem % shape[k];
                        rem /= shape[k];
                    }
                    for (k, i) in idx.iter().enumerate() {
                        fi += i * scale;
                        scale *= shape[k];
                    }
                    let e = elem(ci);
                    stored[fi as usize * width..][..width].copy_from_slice(&e);
                    want.extend_from_slice(&e);
                }
                let mut file = tempfile::tempfile().unwrap();
                file.write_all(&stored).unwrap();
                let mut got = Vec::new();
                FortranReader::new(file, 0, shape, width)
                    .read_to_end(&mut got)
                    .unwrap();
                assert!(got == want, "width {width} shape {shape:?}");
            }
        }
    }

    #[test]
    fn tiles_are_bounded_and_runs_long() {
        for (shape, width) in [
            (&[2u64, 1 << 26][..], 4u64),
            (&[2, 1 << 28], 1),
            (&[1000, 2 << 20], 4),
            (&[1 << 20, 1 << 20], 1),
            (&[3, 5, 7, 1 << 30], 2),
            (&[1 << 30, 3, 5, 7], 8),
            (&[4097, 4099, 4111], 16),
            (&[8192, 8192], 4),
        ] {
            let dims = squeeze(shape);
            let (ext, direct) = tile_for(&dims, width);
            let elems: u64 = ext.iter().product();
            assert!(elems * width <= TILE_BYTES as u64, "{shape:?}: {ext:?}");
            assert!(ext.iter().zip(&dims).all(|(e, d)| 1 <= *e && e <= d));
            // Reads: the leading whole axes and the first partial one.
            let m = (0..dims.len()).find(|&k| ext[k] < dims[k]).unwrap_or(0);
            let read: u64 = ext[..=m].iter().product();
            // Writes: the trailing whole axes and the last partial one.
            let m = (0..dims.len())
                .rev()
                .find(|&k| ext[k] < dims[k])
                .unwrap_or(0);
            let write: u64 = ext[m..].iter().product();
            let floor = (TILE_BYTES as u64 / width).isqrt() / 2 * width;
            assert!(read * width >= floor.min(MIN_RUN), "{shape:?}: {ext:?}");
            if !direct {
                assert!(write * width >= floor.min(MIN_RUN), "{shape:?}: {ext:?}");
            }
        }
    }

    #[test]
    fn squeezed_shapes_need_no_transpose() {
        assert!(same_as_c_order(&[1, 5, 1]));
        assert!(same_as_c_order(&[3, 0, 4]));
        assert!(!same_as_c_order(&[2, 3]));
    }
}
