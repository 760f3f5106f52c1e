//! A convolution kernel's last step: the tiled reader gives it reversed,
//! (out, in, kw, kh); PyTorch wants (out, in, kh, kw), so each window of
//! kw x kh elements (consecutive in the stream) is transposed in memory,
//! many windows a read.

use std::io::{self, Read};

/// The largest window (kh x kw elements) turned; a kernel's is a few dozen bytes.
pub(crate) const MAX_WINDOW: u64 = 1 << 20;

/// Bytes read at a time (whole windows, at least one).
const BATCH: usize = 256 * 1024;

/// Reads `inner`, (rows, cols) windows of `width`-byte elements one after
/// another, and gives each window transposed, (cols, rows).
pub(crate) struct Windows<R> {
    inner: R,
    rows: usize,
    cols: usize,
    width: usize,
    read: Vec<u8>,
    turned: Vec<u8>,
    pos: usize,
}

impl<R: Read> Windows<R> {
    pub(crate) fn new(inner: R, rows: usize, cols: usize, width: usize) -> Self {
        Windows {
            inner,
            rows,
            cols,
            width,
            read: Vec::new(),
            turned: Vec::new(),
            pos: 0,
        }
    }

    /// Reads the next whole windows and turns them; false at the end.
    fn refill(&mut self) -> io::Result<bool> {
        let window = self.rows * self.cols * self.width;
        if window == 0 {
            return Ok(false);
        }
        let want = (BATCH / window).max(1) * window;
        self.read.resize(want, 0);
        let mut got = 0;
        while got < want {
            match self.inner.read(&mut self.read[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if got % window != 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a convolution kernel ended inside a window",
            ));
        }
        let w = self.width;
        self.turned.resize(got, 0);
        for (src, dst) in self.read[..got]
            .chunks_exact(window)
            .zip(self.turned.chunks_exact_mut(window))
        {
            for r in 0..self.rows {
                for c in 0..self.cols {
                    let from = (r * self.cols + c) * w;
                    let to = (c * self.rows + r) * w;
                    dst[to..to + w].copy_from_slice(&src[from..from + w]);
                }
            }
        }
        self.turned.truncate(got);
        self.pos = 0;
        Ok(got > 0)
    }
}

impl<R: Read> Read for Windows<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.pos == self.turned.len() && !self.refill()? {
            return Ok(0);
        }
        let n = (self.turned.len() - self.pos).min(out.len());
        out[..n].copy_from_slice(&self.turned[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_window_comes_out_transposed() {
        // Two 2 x 3 windows of 2-byte elements: (a b c / d e f) -> (a d / b e / c f).
        let data: Vec<u8> = (0u8..24).collect();
        let mut out = Vec::new();
        Windows::new(&data[..], 2, 3, 2)
            .read_to_end(&mut out)
            .unwrap();
        let el = |i: u8| [2 * i, 2 * i + 1];
        let mut want = Vec::new();
        for base in [0u8, 6] {
            for i in [0, 3, 1, 4, 2, 5] {
                want.extend_from_slice(&el(base + i));
            }
        }
        assert_eq!(out, want);
        let mut cut = Vec::new();
        let e = Windows::new(&data[..23], 2, 3, 2)
            .read_to_end(&mut cut)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
