//! Fortran-order (column-major) data read back in C order, in bounded memory.
//!
//! In the file the first axis varies fastest; the output wants the last
//! axis fastest. We take the output a block of `h` first-axis rows at a
//! time: for each combination of the other axes, the block's `h` elements
//! lie together in the file, so a block costs one positional read per
//! combination (one read in all when the block is the whole array), and
//! then the block is emitted in C order from memory.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Memory a block aims for.
pub(crate) const BLOCK_BUDGET: u64 = 8 << 20;

/// A block holds at least one first-axis row (every other axis in full);
/// above this we refuse rather than hold more.
pub(crate) const MAX_BLOCK: u64 = 256 << 20;

/// Why a Fortran array cannot be read in bounded memory.
pub(crate) fn too_wide(shape: &[u64], width: u64) -> Option<u64> {
    let dims = squeeze(shape);
    let rest: u64 = dims
        .iter()
        .skip(1)
        .try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let row = rest.checked_mul(width)?;
    (row > MAX_BLOCK).then_some(row)
}

/// Axes of length 1 change nothing in either order; dropping them leaves
/// fewer, larger runs.
fn squeeze(shape: &[u64]) -> Vec<u64> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// True when Fortran and C order hold the same bytes (at most one axis longer than 1).
pub(crate) fn same_as_c_order(shape: &[u64]) -> bool {
    squeeze(shape).len() <= 1 || shape.contains(&0)
}

/// Reads a Fortran-order array's data from `file` at `base`, yielding C order.
pub struct FortranReader {
    file: File,
    base: u64,
    width: usize,
    d0: u64,
    rest: Vec<u64>,
    /// F-order strides of the other axes, in elements.
    rest_strides: Vec<u64>,
    combos: u64,
    rows_per_block: u64,
    block: Vec<u8>,
    block_start: u64,
    block_rows: u64,
    /// Output position: first-axis row, and C-order index over the other axes.
    row: u64,
    idx: Vec<u64>,
    combo_f: u64,
    carry: Vec<u8>,
}

impl FortranReader {
    /// The caller has checked the data's length and [`too_wide`].
    pub fn new(file: File, base: u64, shape: &[u64], width: usize) -> Self {
        let dims = squeeze(shape);
        let (d0, rest) = match dims.split_first() {
            Some((d0, rest)) => (*d0, rest.to_vec()),
            None => (1, Vec::new()),
        };
        let mut rest_strides = Vec::with_capacity(rest.len());
        let mut s = 1u64;
        for d in &rest {
            rest_strides.push(s);
            s = s.saturating_mul(*d);
        }
        let combos = s;
        let row_bytes = combos.saturating_mul(width as u64).max(1);
        let rows_per_block = (BLOCK_BUDGET / row_bytes).clamp(1, d0.max(1));
        FortranReader {
            file,
            base,
            width,
            d0,
            idx: vec![0; rest.len()],
            rest,
            rest_strides,
            combos,
            rows_per_block,
            block: Vec::new(),
            block_start: 0,
            block_rows: 0,
            row: 0,
            combo_f: 0,
            carry: Vec::new(),
        }
    }

    fn done(&self) -> bool {
        self.row >= self.d0 || self.combos == 0
    }

    fn load_block(&mut self) -> io::Result<()> {
        let w = self.width as u64;
        let a = self.row;
        let h = self.rows_per_block.min(self.d0 - a);
        let run = (h * w) as usize;
        self.block.resize(run * self.combos as usize, 0);
        if h == self.d0 {
            // Every row: the runs are back to back in the file.
            self.file.read_exact_at(&mut self.block, self.base)?;
        } else {
            for c in 0..self.combos {
                let at = self.base + (c * self.d0 + a) * w;
                let dst = &mut self.block[(c as usize) * run..][..run];
                self.file.read_exact_at(dst, at)?;
            }
        }
        self.block_start = a;
        self.block_rows = h;
        Ok(())
    }

    /// Moves to the next output element: the last axis fastest.
    fn advance(&mut self) {
        for k in (0..self.rest.len()).rev() {
            self.idx[k] += 1;
            self.combo_f += self.rest_strides[k];
            if self.idx[k] < self.rest[k] {
                return;
            }
            self.combo_f -= self.rest_strides[k] * self.idx[k];
            self.idx[k] = 0;
        }
        self.row += 1;
    }

    /// Copies the current element to `out` and advances.
    fn emit(&mut self, out: &mut [u8]) -> io::Result<()> {
        if self.row >= self.block_start + self.block_rows || self.block_rows == 0 {
            self.load_block()?;
        }
        let w = self.width;
        let at = (self.combo_f * self.block_rows + (self.row - self.block_start)) as usize * w;
        out.copy_from_slice(&self.block[at..at + w]);
        self.advance();
        Ok(())
    }
}

impl Read for FortranReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let w = self.width;
        let mut n = 0;
        if !self.carry.is_empty() {
            let k = self.carry.len().min(out.len());
            out[..k].copy_from_slice(&self.carry[..k]);
            self.carry.drain(..k);
            n = k;
        }
        while n + w <= out.len() && !self.done() {
            self.emit(&mut out[n..n + w])?;
            n += w;
        }
        if n < out.len() && n < w && !self.done() {
            // A buffer smaller than one element: serve it piecewise.
            let mut elem = vec![0u8; w];
            self.emit(&mut elem)?;
            let k = (out.len() - n).min(w);
            out[n..n + k].copy_from_slice(&elem[..k]);
            self.carry = elem[k..].to_vec();
            n += k;
        }
        Ok(n)
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
        for v in &f_vals {
            file.write_all(&v.to_le_bytes()).unwrap();
        }
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
    fn blocks_smaller_than_the_array() {
        // 300 x 7000 u32: a row is 28 KB, so a block holds ~299 rows, not all 300.
        let (got, want) = roundtrip(&[300, 7000], 1 << 16);
        assert_eq!(got, want);
    }

    #[test]
    fn squeezed_shapes_need_no_transpose() {
        assert!(same_as_c_order(&[1, 5, 1]));
        assert!(same_as_c_order(&[3, 0, 4]));
        assert!(!same_as_c_order(&[2, 3]));
        assert_eq!(too_wide(&[2, 1 << 27], 4), Some(1 << 29));
        assert_eq!(too_wide(&[4096, 4096], 4), None);
    }
}
