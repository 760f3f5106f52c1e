//! Tensor views over a storage (offset, size, stride in elements), checked
//! against the storage, and gathered into C order in bounded memory.
//!
//! The output is cut into blocks of at most [`BLOCK_BUDGET`] bytes: a
//! fixed index on the leading axes, a run of `h` indices on one axis, every
//! index on the axes after it. Each block is filled from the file with the
//! fewest positional reads we can find: one read of the storage range the
//! block spans when that range is small, else one read per run of elements
//! that lie together (the axis of stride 1, as [`FortranReader`] does for
//! Fortran order), else one read per element (a pathological view).
//!
//! [`FortranReader`]: crate::source::npy::fortran

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Output bytes a block holds at most (a single element may exceed it).
pub(crate) const BLOCK_BUDGET: u64 = 4 << 20;

/// A block's storage span is read in one go when it is at most this.
const WINDOW: u64 = 8 << 20;

/// A view of a storage: `shape`, `stride` (elements) from `offset` (elements).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// First element's index in the storage.
    pub offset: u64,
    /// The tensor's shape.
    pub shape: Vec<u64>,
    /// Elements between neighbours along each axis.
    pub stride: Vec<u64>,
    /// Bytes per element.
    pub width: u64,
}

impl View {
    /// Elements in the tensor, if it fits 64 bits.
    pub fn numel(&self) -> Option<u64> {
        crate::dtype::numel(&self.shape)
    }

    /// Storage bytes the view needs: up to and including its last element
    /// (0 for an empty tensor). `None` on overflow.
    pub fn needed_bytes(&self) -> Option<u64> {
        if self.shape.len() != self.stride.len() {
            return None;
        }
        if self.numel()? == 0 {
            return Some(0);
        }
        let mut last = self.offset;
        for (&d, &s) in self.shape.iter().zip(&self.stride) {
            last = last.checked_add((d - 1).checked_mul(s)?)?;
        }
        last.checked_add(1)?.checked_mul(self.width)
    }

    /// True when the view's elements lie back to back in C order from
    /// `offset`: the bytes can be copied as they are.
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == Some(0) {
            return true;
        }
        let mut expect = 1u64;
        for (&d, &s) in self.shape.iter().zip(&self.stride).rev() {
            if d == 1 {
                continue;
            }
            if s != expect {
                return false;
            }
            expect = expect.saturating_mul(d);
        }
        true
    }

    /// The same elements without axes of length 1 (their stride is moot).
    fn squeezed(&self) -> View {
        let (shape, stride) = self
            .shape
            .iter()
            .zip(&self.stride)
            .filter(|(&d, _)| d != 1)
            .map(|(&d, &s)| (d, s))
            .unzip();
        View {
            offset: self.offset,
            shape,
            stride,
            width: self.width,
        }
    }
}

/// Reads a view's elements in C order from a storage at `base` in `file`.
/// The caller has checked [`View::needed_bytes`] against the storage.
pub(crate) struct StridedReader {
    file: File,
    base: u64,
    view: View,
    /// The blocked axis; axes before it are fixed per block.
    axis: usize,
    /// Indices on the axes before `axis`.
    prefix: Vec<u64>,
    /// Start of the next block on `axis`.
    at: u64,
    /// Indices per block on `axis`.
    per_block: u64,
    done: bool,
    block: Vec<u8>,
    pos: usize,
    scratch: Vec<u8>,
}

impl StridedReader {
    /// A reader of `view`'s bytes, storage starting at byte `base` of `file`.
    pub(crate) fn new(file: File, base: u64, view: &View) -> Self {
        let view = view.squeezed();
        let w = view.width.max(1);
        // The first axis whose trailing block (one index here, all after) fits the budget.
        let (mut axis, mut tail, mut inner) = (0, w, w);
        for k in (0..view.shape.len()).rev() {
            // `tail`: the bytes of one index on axis k (every axis after it in full).
            (axis, tail) = (k, inner);
            let next = inner.saturating_mul(view.shape[k]);
            if next > BLOCK_BUDGET {
                break;
            }
            inner = next;
        }
        let per_block = match view.shape.get(axis) {
            Some(&d) => (BLOCK_BUDGET / tail).clamp(1, d.max(1)),
            None => 1,
        };
        let done = view.numel() == Some(0);
        StridedReader {
            file,
            base,
            prefix: vec![0; axis],
            axis,
            at: 0,
            per_block,
            done,
            block: Vec::new(),
            pos: 0,
            scratch: Vec::new(),
            view,
        }
    }

    /// The next block's view: fixed prefix, `h` indices from `at` on the axis.
    fn next_block(&mut self) -> Option<View> {
        if self.done {
            return None;
        }
        let v = &self.view;
        if v.shape.is_empty() {
            self.done = true;
            return Some(v.clone());
        }
        let dim = v.shape[self.axis];
        let h = self.per_block.min(dim - self.at);
        let mut offset = v.offset + self.at * v.stride[self.axis];
        for (k, &i) in self.prefix.iter().enumerate() {
            offset += i * v.stride[k];
        }
        let mut shape = vec![h];
        shape.extend_from_slice(&v.shape[self.axis + 1..]);
        let stride = v.stride[self.axis..].to_vec();
        let block = View {
            offset,
            shape,
            stride,
            width: v.width,
        };
        // Advance: the axis, then the prefix odometer.
        self.at += h;
        if self.at >= dim {
            self.at = 0;
            let mut k = self.axis;
            loop {
                if k == 0 {
                    self.done = true;
                    break;
                }
                k -= 1;
                self.prefix[k] += 1;
                if self.prefix[k] < v.shape[k] {
                    break;
                }
                self.prefix[k] = 0;
            }
        }
        Some(block)
    }

    fn load(&mut self, b: &View) -> io::Result<()> {
        let w = b.width as usize;
        let n = b.numel().unwrap_or(0) as usize;
        self.block.clear();
        self.block.resize(n * w, 0);
        self.pos = 0;
        let span = b.needed_bytes().unwrap_or(0) - b.offset * b.width;
        let at = self.base + b.offset * b.width;
        if span <= WINDOW.max(self.block.len() as u64) {
            self.scratch.resize(span as usize, 0);
            self.file.read_exact_at(&mut self.scratch, at)?;
            let scratch = std::mem::take(&mut self.scratch);
            let mut out = 0;
            for_each_index(&b.shape, &b.stride, |src| {
                let s = src as usize * w;
                self.block[out..out + w].copy_from_slice(&scratch[s..s + w]);
                out += w;
            });
            self.scratch = scratch;
            return Ok(());
        }
        // Runs along the axis of stride 1, if there is one.
        let run_axis = (0..b.shape.len()).rev().find(|&k| b.stride[k] == 1);
        let c_strides = c_strides(&b.shape);
        let (run_len, others_shape, others_stride, others_c): (u64, Vec<u64>, Vec<u64>, Vec<u64>) =
            match run_axis {
                Some(r) => (
                    b.shape[r],
                    drop_axis(&b.shape, r),
                    drop_axis(&b.stride, r),
                    drop_axis(&c_strides, r),
                ),
                None => (1, b.shape.clone(), b.stride.clone(), c_strides.clone()),
            };
        let out_step = run_axis.map_or(1, |r| c_strides[r]) as usize * w;
        self.scratch.resize(run_len as usize * w, 0);
        let mut err = Ok(());
        let (file, block, scratch) = (&self.file, &mut self.block, &mut self.scratch);
        for_each_index2(&others_shape, &others_stride, &others_c, |src, dst| {
            if err.is_err() {
                return;
            }
            if let Err(e) = file.read_exact_at(scratch, at + src * b.width) {
                err = Err(e);
                return;
            }
            let mut o = dst as usize * w;
            for e in scratch.chunks_exact(w) {
                block[o..o + w].copy_from_slice(e);
                o += out_step;
            }
        });
        err
    }
}

fn drop_axis(v: &[u64], k: usize) -> Vec<u64> {
    v.iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, &x)| x)
        .collect()
}

/// The strides of a C-order (row-major) tensor of `shape`, in elements.
pub(crate) fn c_strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1].saturating_mul(shape[k + 1]);
    }
    s
}

/// Calls `f` with the storage index of every element, in C order.
fn for_each_index(shape: &[u64], stride: &[u64], mut f: impl FnMut(u64)) {
    let c = c_strides(shape);
    for_each_index2(shape, stride, &c, |src, _| f(src));
}

/// Calls `f(src, dst)` for every index in C order: `src = Σ i·stride`, `dst = Σ i·c`.
fn for_each_index2(shape: &[u64], stride: &[u64], c: &[u64], mut f: impl FnMut(u64, u64)) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0u64; shape.len()];
    let (mut src, mut dst) = (0u64, 0u64);
    loop {
        f(src, dst);
        let mut k = shape.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            src += stride[k];
            dst += c[k];
            if idx[k] < shape[k] {
                break;
            }
            src -= stride[k] * idx[k];
            dst -= c[k] * idx[k];
            idx[k] = 0;
        }
    }
}

impl Read for StridedReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.block.len() {
            match self.next_block() {
                Some(b) => self.load(&b)?,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.block.len() - self.pos);
        out[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Reads `view` over storage values 0..len (u32) and compares with a naive gather.
    fn check(view: View, len: u64) {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"xyz").unwrap();
        for v in 0..len as u32 {
            file.write_all(&v.to_le_bytes()).unwrap();
        }
        assert!(view.needed_bytes().unwrap() <= len * 4);
        let mut want = Vec::new();
        for_each_index(&view.shape, &view.stride, |i| {
            want.extend_from_slice(&((view.offset + i) as u32).to_le_bytes())
        });
        let mut got = Vec::new();
        StridedReader::new(file, 3, &view)
            .read_to_end(&mut got)
            .unwrap();
        assert_eq!(got, want, "{view:?}");
    }

    fn v(offset: u64, shape: &[u64], stride: &[u64]) -> View {
        View {
            offset,
            shape: shape.to_vec(),
            stride: stride.to_vec(),
            width: 4,
        }
    }

    #[test]
    fn gathers_views() {
        check(v(0, &[3, 4], &[4, 1]), 12);
        check(v(0, &[4, 3], &[1, 4]), 12); // transposed
        check(v(1, &[2, 2], &[4, 2]), 12); // step slice
        check(v(2, &[5, 3], &[0, 1]), 12); // expanded
        check(v(7, &[], &[]), 12); // 0-d
        check(v(0, &[0, 3], &[3, 1]), 12); // empty
        check(v(0, &[2, 3, 4, 5], &[60, 1, 15, 3]), 120); // channels_last
    }

    #[test]
    fn gathers_beyond_one_block() {
        // A 1536 x 1536 transpose: 9 MiB, several blocks, span reads too large.
        let n = 1536u64;
        check(v(0, &[n, n], &[1, n]), n * n);
        // A long 1-d step slice: no stride-1 axis, span reads.
        check(v(5, &[1 << 21], &[2]), (1 << 22) + 5);
    }

    #[test]
    fn bounds_and_contiguity() {
        assert_eq!(v(2, &[2, 3], &[3, 1]).needed_bytes(), Some(32));
        assert_eq!(v(0, &[0], &[1]).needed_bytes(), Some(0));
        assert_eq!(v(u64::MAX, &[2], &[1]).needed_bytes(), None);
        assert_eq!(v(0, &[2, 3], &[1]).needed_bytes(), None);
        assert!(v(5, &[1, 3], &[99, 1]).is_contiguous());
        assert!(!v(0, &[3, 4], &[1, 3]).is_contiguous());
    }
}
