//! Reading gpt-oss MXFP4 experts transposed, a band of block columns at a
//! time.
//!
//! Output row `(e, k)` is code column `k` of expert `e` across all its
//! source rows, so a piece of output rows needs a column slice of every
//! source row. The reader keeps one band of the expert (block columns
//! `[g0, g0 + width)` of all its rows, at most [`BAND_BYTES`]) and serves
//! pieces from it: a gpt-oss-120b expert (5760 rows of 90 blocks, 8.3 MB)
//! is three bands of 30 block columns. Its scales are held block column
//! after block column, as the kernel loads them. An expert that fits in a band is read
//! with one positional read; bands of a wider expert are copied out of
//! whole-row reads of at most [`READ_BYTES`], so each band costs a few
//! reads, not one per row.

use super::{too_large, QuantError, TensorAt};
use crate::dequant::arith::E8M0_NAN;
use crate::dequant::mxfp4::{self, Band, Table, BLOCK, BLOCK_BYTES};
use crate::{Error, ErrorKind, Result};

/// The most block bytes a band holds: two part readers side by side each
/// hold one (4 MiB bands took a 1 GiB gpt-oss tensor's process to 35 MiB).
pub(crate) const BAND_BYTES: u64 = 3 << 20;

/// The most bytes one read of whole rows takes, when a band is narrower
/// than the expert.
const READ_BYTES: u64 = 512 << 10;

/// The geometry of one MXFP4 weight: `blocks` `[experts, rows, groups, 16]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    /// Experts.
    pub experts: u64,
    /// Source rows per expert: the output's last dimension.
    pub rows: u64,
    /// Blocks per source row.
    pub groups: u64,
}

/// The band held, and the table of values.
pub(crate) struct Bands {
    table: Table,
    geo: Geometry,
    /// Block columns per band.
    width: u64,
    /// The expert and first block column of the band held.
    held: Option<(u64, u64)>,
    blocks: Vec<u8>,
    /// The band's scales as read, row after row.
    read_scales: Vec<u8>,
    /// Those block column after block column, as [`Band`] takes them.
    scales: Vec<u8>,
    /// Whole rows as read, kept from band to band (a fresh 512 KiB buffer
    /// a band was zeroed, and mapped and unmapped by the allocator, each
    /// time).
    rows_read: Vec<u8>,
}

impl Bands {
    pub(crate) fn new(geo: Geometry) -> Self {
        let width = Self::width(geo);
        Bands {
            table: Table::new(),
            geo,
            width,
            held: None,
            blocks: Vec::new(),
            read_scales: Vec::new(),
            scales: Vec::new(),
            rows_read: Vec::new(),
        }
    }

    /// Bands of `width` block columns, whatever the expert's size.
    /// Block columns a band holds.
    fn width(geo: Geometry) -> u64 {
        let per_column = geo.rows.saturating_mul(BLOCK_BYTES as u64).max(1);
        let most = (BAND_BYTES / per_column).clamp(1, geo.groups.max(1));
        // As many bands as that takes, of one width (gpt-oss's 90 block
        // columns: three of 30, not 34, 34 and 22).
        let bands = geo.groups.max(1).div_ceil(most);
        geo.groups.max(1).div_ceil(bands)
    }

    /// Output rows a part of the weight starts at a multiple of: a band's
    /// when every expert is whole bands, else an expert's (a part then
    /// never reads a band of its neighbour's).
    pub(crate) fn part_rows(geo: Geometry) -> u64 {
        let width = Self::width(geo);
        let codes = geo.groups.saturating_mul(BLOCK as u64).max(1);
        match geo.groups % width {
            0 => width * BLOCK as u64,
            _ => codes,
        }
        .clamp(1, 1 << 20)
    }

    #[cfg(test)]
    pub(crate) fn narrow(geo: Geometry, width: u64) -> Self {
        Bands {
            width,
            ..Bands::new(geo)
        }
    }

    /// Dequantizes output rows `[v0, v1)` of the `[experts * groups * 32,
    /// rows]` view into `out`, as `to` (F32, BF16 or F16; through
    /// `scratch` off the vector path).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rows(
        &mut self,
        blocks: &TensorAt,
        scales: &TensorAt,
        v0: u64,
        v1: u64,
        to: crate::Dtype,
        scratch: &mut Vec<f32>,
        out: &mut [u8],
    ) -> Result<()> {
        let w = (to.bits() / 8) as usize;
        let codes = self.geo.groups * BLOCK as u64;
        let rows = usize::try_from(self.geo.rows).map_err(|_| too_large())?;
        let mut v = v0;
        while v < v1 {
            let (e, k) = (v / codes, v % codes);
            let g0 = k / BLOCK as u64 / self.width * self.width;
            let width = self.width.min(self.geo.groups - g0);
            if self.held != Some((e, g0)) {
                self.load(blocks, scales, e, g0, width)?;
            }
            let band_end = (g0 + width) * BLOCK as u64;
            let count = (v1 - v).min(band_end - k);
            let at = usize::try_from((v - v0) * self.geo.rows).map_err(|_| too_large())?;
            let n = usize::try_from(count).map_err(|_| too_large())? * rows;
            let band = Band {
                blocks: &self.blocks,
                scales: &self.scales,
                width: width as usize,
                rows,
            };
            let k_in_band = (k - g0 * BLOCK as u64) as usize;
            let out = &mut out[at * w..(at + n) * w];
            mxfp4::transposed_rows_into(&band, &self.table, k_in_band, to, scratch, out);
            v += count;
        }
        Ok(())
    }

    /// Reads block columns `[g0, g0 + width)` of expert `e`, and refuses a
    /// NaN scale in them.
    fn load(
        &mut self,
        blocks: &TensorAt,
        scales: &TensorAt,
        e: u64,
        g0: u64,
        width: u64,
    ) -> Result<()> {
        self.held = None;
        let Geometry { rows, groups, .. } = self.geo;
        let first_row = e * rows;
        read_band(
            blocks,
            first_row,
            rows,
            groups,
            g0,
            width,
            BLOCK_BYTES as u64,
            &mut self.blocks,
            &mut self.rows_read,
        )?;
        read_band(
            scales,
            first_row,
            rows,
            groups,
            g0,
            width,
            1,
            &mut self.read_scales,
            &mut self.rows_read,
        )?;
        // `contains` scans bytes a word at a time (a byte loop was 3 % of
        // a conversion's instructions); the position only for the error.
        let nan = match self.read_scales.contains(&E8M0_NAN) {
            true => self.read_scales.iter().position(|&s| s == E8M0_NAN),
            false => None,
        };
        if let Some(i) = nan {
            let (r, j) = (i as u64 / width, i as u64 % width);
            let element = (first_row + r) * groups + g0 + j;
            let e = QuantError::Unsupported(format!(
                "mxfp4: {}: scale 0xFF (NaN in E8M0) for block {} of row {r} of expert {e}",
                scales.name,
                g0 + j
            ));
            return Err(Error::new(ErrorKind::Quantized(e))
                .with_tensor(&scales.name)
                .at_offset(scales.span.offset + element));
        }
        // Block column after block column: the kernel takes 16 rows' scales
        // of a block with one load.
        let (rows, width) = (rows as usize, width as usize);
        self.scales.resize(self.read_scales.len(), 0);
        for (r, row) in self.read_scales.chunks_exact(width).enumerate() {
            for (j, &s) in row.iter().enumerate() {
                self.scales[j * rows + r] = s;
            }
        }
        self.held = Some((e, g0));
        Ok(())
    }
}

/// Columns `[g0, g0 + width)` (of `unit` bytes each) of rows `[first_row,
/// first_row + rows)` of `p`, a `[.., groups]` array of units, into `out`,
/// row after row; `buf` holds the whole rows read.
#[allow(clippy::too_many_arguments)]
fn read_band(
    p: &TensorAt,
    first_row: u64,
    rows: u64,
    groups: u64,
    g0: u64,
    width: u64,
    unit: u64,
    out: &mut Vec<u8>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let row_bytes = groups * unit;
    let slice = width * unit;
    // Every byte is read into below: the buffer (kept from band to band) is
    // not zeroed again, only where it grows.
    out.resize(usize::try_from(rows * slice).map_err(|_| too_large())?, 0);
    if width == groups {
        // The whole rows: one read.
        return read_at(p, first_row * row_bytes, out);
    }
    if row_bytes > READ_BYTES {
        // Rows too wide to read whole: each row's slice.
        for (r, chunk) in out.chunks_exact_mut(slice as usize).enumerate() {
            read_at(p, (first_row + r as u64) * row_bytes + g0 * unit, chunk)?;
        }
        return Ok(());
    }
    let per_read = (READ_BYTES / row_bytes).max(1);
    let mut r = 0;
    while r < rows {
        let n = per_read.min(rows - r);
        // Every byte is read into: zeroed only where it grows.
        let len = (n * row_bytes) as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let buf = &mut buf[..len];
        read_at(p, (first_row + r) * row_bytes, buf)?;
        for (i, row) in buf.chunks_exact(row_bytes as usize).enumerate() {
            let from = (g0 * unit) as usize;
            let to = ((r as usize) + i) * slice as usize;
            out[to..to + slice as usize].copy_from_slice(&row[from..from + slice as usize]);
        }
        r += n;
    }
    Ok(())
}

/// `buf.len()` bytes of `p` from byte `at` of its data, checked to lie in it.
fn read_at(p: &TensorAt, at: u64, buf: &mut [u8]) -> Result<()> {
    if at
        .checked_add(buf.len() as u64)
        .is_none_or(|end| end > p.span.len)
    {
        let e = QuantError::Shape {
            scheme: "read",
            actual: p.shape.clone(),
            expected: "a tensor as long as its shape".into(),
        };
        return Err(Error::new(ErrorKind::Quantized(e)).with_tensor(&p.name));
    }
    p.span
        .bytes
        .read_exact_at(buf, p.span.offset + at)
        .map_err(|e| Error::io(e).with_tensor(&p.name))
}
