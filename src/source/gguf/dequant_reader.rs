//! A quantized tensor read as a stream of dequantized elements: a bounded
//! run of blocks at a time, positional reads, no state shared with others.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::dequant::ggml::GgmlType;
use crate::Dtype;

/// Elements dequantized per run (at most; at least one block): from at
/// most 1 MiB of blocks (every quantized type is under 4 bytes an
/// element), to at most 1 MiB of output.
const RUN_ELEMS: u64 = 1 << 18;

/// Reads `blocks` blocks of `ty` at `offset` of `file` and yields them
/// dequantized, as `to` (F32, F16 or BF16), little-endian. A read whose
/// buffer holds at least a block's output is decoded straight into it;
/// only a smaller one goes through `out`. Its memory: one run of blocks,
/// the kernel's cache-sized `f32` step, and `out` for small reads.
pub(crate) struct DequantReader {
    file: Arc<File>,
    ty: GgmlType,
    to: Dtype,
    /// Where the next run starts.
    offset: u64,
    /// Blocks not yet read.
    blocks: u64,
    raw: Vec<u8>,
    scratch: Vec<f32>,
    out: Vec<u8>,
    pos: usize,
}

impl DequantReader {
    pub(crate) fn new(file: Arc<File>, ty: GgmlType, to: Dtype, offset: u64, blocks: u64) -> Self {
        DequantReader {
            file,
            ty,
            to,
            offset,
            blocks,
            raw: Vec::new(),
            scratch: Vec::new(),
            out: Vec::new(),
            pos: 0,
        }
    }

    /// Output bytes of one block.
    fn block_out(&self) -> usize {
        // At most 256 elements of at most 4 bytes.
        (self.ty.block_elems * self.to.byte_width().unwrap_or(4)) as usize
    }

    /// Reads the next `n` blocks (at most a run's, at least one) and
    /// dequantizes them into `dst`, which holds exactly their output.
    fn decode(&mut self, n: u64, dst: &mut [u8]) -> io::Result<()> {
        // Bounded by RUN_ELEMS (or one block): fits in usize.
        let raw_len = (n * self.ty.block_bytes) as usize;
        self.raw.resize(raw_len, 0);
        self.file.read_exact_at(&mut self.raw, self.offset)?;
        self.ty
            .dequantize_into(&self.raw, self.to, &mut self.scratch, dst);
        self.offset += raw_len as u64;
        self.blocks -= n;
        Ok(())
    }
}

impl Read for DequantReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.out.len() {
            let n = (self.out.len() - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        if self.blocks == 0 || buf.is_empty() {
            return Ok(0);
        }
        let per_run = (RUN_ELEMS / self.ty.block_elems).max(1);
        let block_out = self.block_out();
        let fit = (buf.len() / block_out) as u64;
        let n = self.blocks.min(per_run).min(fit.max(1));
        let len = n as usize * block_out;
        if fit > 0 {
            self.decode(n, &mut buf[..len])?;
            return Ok(len);
        }
        // Smaller than a block: decode it aside, hand it out in pieces.
        let mut out = std::mem::take(&mut self.out);
        out.resize(len, 0);
        let decoded = self.decode(n, &mut out);
        self.out = out;
        decoded?;
        self.pos = 0;
        self.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequant::store_f32;
    use std::io::Write;

    /// A tensor of several runs reads as one dequantization of all its
    /// blocks: the run boundaries change nothing, read sizes neither.
    #[test]
    fn runs_join_seamlessly() {
        let ty = GgmlType::from_id(12).unwrap(); // Q4_K
        let blocks = RUN_ELEMS / ty.block_elems * 2 + 3;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut raw: Vec<u8> = (0..blocks * ty.block_bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        // Finite scales: d = dmin = 1/64.
        for b in raw.chunks_exact_mut(ty.block_bytes as usize) {
            b[..4].copy_from_slice(&[0x00, 0x24, 0x00, 0x24]);
        }
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 5]).unwrap();
        file.write_all(&raw).unwrap();
        let mut values = vec![0f32; (blocks * ty.block_elems) as usize];
        ty.dequantize(&raw, &mut values);
        let mut want = vec![0u8; values.len() * 2];
        store_f32(&values, Dtype::BF16, &mut want);
        let file = Arc::new(file);
        for read_size in [1usize, 4093, 1 << 20] {
            let mut r = DequantReader::new(file.clone(), ty, Dtype::BF16, 5, blocks);
            let mut got = Vec::new();
            let mut buf = vec![0u8; read_size];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if read_size == 1 && got.len() > 100_000 {
                    // Byte by byte for a while, then the rest at once.
                    r.read_to_end(&mut got).unwrap();
                    break;
                }
            }
            assert!(got == want, "read size {read_size}");
        }
    }
}
