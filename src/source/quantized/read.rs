//! Reading a quantized weight dequantized, piece by piece: a blocking
//! reader that any thread may drive.

use std::io::{self, Read};
use std::sync::{Arc, OnceLock};

use super::{too_large, Kind, QuantError, TensorAt, Weight, PIECE_ELEMENTS};
use crate::dequant::{self, arith};
use crate::source::BlockingPart;
use crate::{Dtype, Error, ErrorKind, Result};

/// Yields one weight's dequantized bytes, `to` elements, row-major.
pub(crate) struct DequantReader {
    w: Weight,
    to: Dtype,
    /// The next output row to dequantize.
    row: u64,
    /// The row after the last one this reader yields.
    end: u64,
    /// Rows per piece.
    step: u64,
    /// What the readers of one weight's parts share ([`parts_of`]).
    shared: Arc<Shared>,
    /// The MXFP4 band held: on the first piece, one a finished part left,
    /// else made.
    bands: Option<super::mxfp4::Bands>,
    /// compressed-tensors MXFP4's table of values, made on the first piece.
    table: Option<dequant::mxfp4::Table>,
    /// GPTQ's strip of words, zero words and scales, read once for the
    /// pieces in it.
    strip: Option<GptqStrip>,
    /// The strip after it, read a little at a time while another part
    /// reader writes (see [`DequantReader::read_ahead`]), or buffers to
    /// read it into.
    ahead: Option<GptqStrip>,
    /// The rows of the part this reader's thread is likely to read next
    /// (the copy engine's readers take parts in turn), whose first strip
    /// is read ahead during this part's last one; `None`: the last part.
    then: Option<std::ops::Range<u64>>,
    /// The current piece's bytes, and how many were handed out.
    bytes: Vec<u8>,
    pos: usize,
    /// The current piece as `f32` before it is stored (FP8 stores straight
    /// into `bytes`: this is then the scalar path's cache-sized step).
    values: Vec<f32>,
    /// The current piece's input bytes (codes, packed words), read into
    /// this one buffer piece after piece: it is zeroed only where it grows.
    input: Vec<u8>,
    /// The current piece's scale bytes, likewise kept.
    raw_scales: Vec<u8>,
    /// Those scales decoded.
    scales: Vec<f32>,
    /// NF4/FP4's nested code table (256 values), read on the first piece.
    nested_code: Option<Vec<f32>>,
}

impl DequantReader {
    pub(crate) fn new(w: Weight, to: Dtype) -> Self {
        let rows = w.shape[0];
        Self::rows(w, to, 0..rows)
    }

    /// A reader of output rows `rows` only: a part of the weight, read
    /// beside the others ([`parts`]).
    pub(crate) fn rows(w: Weight, to: Dtype, rows: std::ops::Range<u64>) -> Self {
        let cols = w.shape[1].max(1);
        let step = (PIECE_ELEMENTS / cols).max(1);
        // MXFP4's pieces are made in the caller's buffer whatever their
        // rows (`unit`): as long as the others', so that one kernel call
        // fills a whole copy-engine chunk (a gpt-oss expert's 5760 columns:
        // 91 rows of BF16 a MiB), each source block loaded once for them.
        // GPTQ and AWQ read their words as a strip of the packed matrix's
        // columns, a positional read per packed row: pieces of 8 x (AWQ 4 x)
        // the rows make those reads that much longer and fewer (at 64 rows, 256-byte
        // reads were half the CPU time of a 1 GiB GPTQ weight).
        let step = match &*w.kind {
            Kind::Gptq { .. } => step.saturating_mul(STRIP_ROWS),
            // AWQ's pieces go whole through `bytes` when cut: kept at 4 x.
            Kind::Awq { .. } => step.saturating_mul(4),
            _ => step,
        };
        DequantReader {
            w,
            to,
            row: rows.start,
            end: rows.end,
            step,
            shared: Arc::default(),
            bands: None,
            table: None,
            strip: None,
            ahead: None,
            then: None,
            bytes: Vec::new(),
            pos: 0,
            values: Vec::new(),
            input: Vec::new(),
            raw_scales: Vec::new(),
            scales: Vec::new(),
            nested_code: None,
        }
    }

    /// The next piece's rows, and its length in bytes.
    fn next_rows(&self) -> Result<(u64, u64, usize)> {
        let [rows, cols] = self.w.shape;
        let r1 = (self.row + self.step).min(rows).min(self.end);
        let count = usize::try_from((r1 - self.row) * cols).map_err(|_| too_large())?;
        let width = (self.to.bits() / 8) as usize;
        let len = count.checked_mul(width).ok_or_else(too_large)?;
        Ok((self.row, r1, len))
    }

    /// Rows a piece is cut in when the caller's buffer holds less than a
    /// whole one, so that it is made in that buffer (no copy through
    /// `bytes`): the vector kernels' tile (8 rows of GPTQ), else a row
    /// (MXFP4's kernel takes any rows). `None`: AWQ, whose pieces read
    /// their strip of words afresh, and are kept whole.
    fn unit(&self) -> Option<u64> {
        match &*self.w.kind {
            Kind::Awq { .. } => None,
            Kind::Gptq { .. } => Some(8),
            _ => Some(1),
        }
    }

    /// Dequantizes the next piece's rows up to `r1` (at most
    /// [`Self::next_rows`]'s) into `out`, their length: every kind writes
    /// each of its bytes.
    fn next_piece(&mut self, r1: u64, out: &mut [u8]) -> Result<()> {
        let [_, cols] = self.w.shape;
        let r0 = self.row;
        let count = usize::try_from((r1 - r0) * cols).map_err(|_| too_large())?;
        let kind = self.w.kind.clone();
        // These are stored straight into `out`, a few rows at a time; the
        // others through `values`, the whole piece.
        let direct = matches!(
            &*kind,
            Kind::Fp8 { .. }
                | Kind::Gptq { .. }
                | Kind::Mxfp4 { .. }
                | Kind::FourBit { .. }
                | Kind::CtInt { .. }
        );
        if !direct {
            self.values.clear();
            self.values.resize(count, 0.0);
        }
        match &*kind {
            Kind::Fp8 {
                weight,
                scale,
                tiling,
                mx,
                ..
            } => {
                let codes = read_elems_in(weight, r0 * cols, count, &mut self.input)?;
                let scale_cols = cols.div_ceil(tiling.cols).max(1);
                let (s0, s1) = (r0 / tiling.rows, (r1 - 1) / tiling.rows + 1);
                let scale_count = scale_elems(scale).min(s1 * scale_cols) - s0 * scale_cols;
                let raw = read_elems_in(
                    scale,
                    s0 * scale_cols,
                    to_usize(scale_count)?,
                    &mut self.raw_scales,
                )?;
                // MXFP8's U8 scales are E8M0 exponents, their values BF16.
                let (decoded, dtype) = match *mx {
                    true => (Dtype::F8_E8M0, Dtype::BF16),
                    false => (scale.dtype, scale.dtype),
                };
                if decoded == Dtype::F8_E8M0 {
                    refuse_e8m0_nan(scale, s0 * scale_cols, raw)?;
                }
                let scales = &mut self.scales;
                arith::scale_values(decoded, raw, scales);
                // A per-tensor scale ([] or [1]) covers every row: one value.
                let scale_cols = if scales.len() == 1 {
                    1
                } else {
                    to_usize(scale_cols)?
                };
                let scales = dequant::fp8::Scales {
                    values: scales,
                    cols: scale_cols,
                    tiling: *tiling,
                    dtype,
                };
                let cols = to_usize(cols)?;
                let (values, bytes) = (&mut self.values, &mut *out);
                dequant::fp8::rows_into(codes, cols, r0, &scales, self.to, values, bytes);
            }
            Kind::Gptq {
                qweight,
                qzeros,
                scales,
                g_idx,
                packing,
                group_size,
            } => {
                // Its own handle: the strip reads below take the reader.
                let shared = self.shared.clone();
                let groups = once(&shared.groups, || {
                    gptq_groups(g_idx.as_deref(), scales.shape[0], cols, *group_size)
                })?;
                let runs = once(&shared.runs, || Ok(crate::cast::simd::int4_runs(groups)))?;
                let words = StripOf {
                    qweight,
                    qzeros,
                    scales,
                    per: packing.per_word() as u64,
                };
                let held = self.strip.as_ref();
                if !held.is_some_and(|s| s.s0 <= r0 && r1 <= s.s1) {
                    let s1 = self.strip_end(r0).max(r1);
                    self.read_strip(&words, r0, s1)?;
                }
                let s = self.strip.as_ref().expect("read above");
                let piece = dequant::gptq::Piece {
                    n0: to_usize(s.s0)?,
                    rows: to_usize(s.s1 - s.s0)?,
                    qweight: &s.qweight[..s.lens[0]],
                    zeros: &s.zeros[..s.lens[1]],
                    zero_words: s.zero_words,
                    scales: &s.scales,
                    groups,
                    runs,
                };
                let first = to_usize(r0 - s.s0)?;
                let (values, bytes) = (&mut self.values, &mut *out);
                dequant::gptq::rows_into(
                    &piece,
                    first,
                    *packing,
                    scales.dtype,
                    self.to,
                    values,
                    bytes,
                );
                self.read_ahead(&words);
            }
            Kind::Awq {
                qweight,
                qzeros,
                scales,
                group_size,
            } => {
                let nb = r1 - r0;
                let (w0, w1) = (r0 / 8, (r1 - 1) / 8 + 1);
                let qw = read_columns(qweight, w0, w1 - w0)?;
                let zeros = read_columns(qzeros, w0, w1 - w0)?;
                let raw = read_column_bytes(scales, r0, nb)?;
                let mut sv = Vec::new();
                arith::scale_values(scales.dtype, &raw, &mut sv);
                let piece = dequant::awq::Piece {
                    n0: to_usize(r0)?,
                    words: to_usize(w1 - w0)?,
                    qweight: &qw,
                    zeros: &zeros,
                    scales: &sv,
                    group_size: to_usize(*group_size)?,
                    k_len: to_usize(cols)?,
                };
                dequant::awq::rows(&piece, scales.dtype, &mut self.values);
            }
            Kind::Int8 { weight, scb } => {
                let codes = read_elems(weight, r0 * cols, count)?;
                let raw = read_elems(scb, r0, to_usize(r1 - r0)?)?;
                let mut absmax = Vec::new();
                arith::scale_values(Dtype::F32, &raw, &mut absmax);
                dequant::bnb::int8_rows(&codes, to_usize(cols)?, &absmax, &mut self.values);
            }
            Kind::Nvfp4 {
                weight,
                scale,
                global,
                variant,
            } => {
                let packed = read_elems(weight, r0 * cols / 2, count / 2)?;
                let per_row = cols / 16;
                let raw = read_elems(scale, r0 * per_row, to_usize((r1 - r0) * per_row)?)?;
                let mut scales = Vec::new();
                arith::scale_values(Dtype::F8_E4M3, &raw, &mut scales);
                let g =
                    f32::from_le_bytes(read_elems(global, 0, 1)?[..4].try_into().expect("4 bytes"));
                dequant::nvfp4::rows(
                    &packed,
                    to_usize(cols)?,
                    &scales,
                    g,
                    *variant,
                    &mut self.values,
                );
            }
            Kind::FourBit {
                weight,
                absmax,
                nested,
                record,
            } => {
                let (e0, e1) = (r0 * cols, r1 * cols);
                let packed_len = to_usize(e1.div_ceil(2) - e0 / 2)?;
                let packed = read_elems_in(weight, e0 / 2, packed_len, &mut self.input)?;
                let (b0, b1) = (e0 / record.blocksize, (e1 - 1) / record.blocksize + 1);
                let raw = read_elems_in(absmax, b0, to_usize(b1 - b0)?, &mut self.raw_scales)?;
                match (nested.as_deref(), record.nested) {
                    (Some((nabs, nmap)), Some((nbs, offset))) => {
                        let (g0, g1) = (b0 / nbs, (b1 - 1) / nbs + 1);
                        let mut groups = Vec::new();
                        let graw = read_elems(nabs, g0, to_usize(g1 - g0)?)?;
                        arith::scale_values(Dtype::F32, &graw, &mut groups);
                        if self.nested_code.is_none() {
                            let mut code = Vec::new();
                            arith::scale_values(Dtype::F32, &read_elems(nmap, 0, 256)?, &mut code);
                            self.nested_code = Some(code);
                        }
                        let code = self.nested_code.as_deref().expect("read above");
                        self.scales =
                            dequant::bnb::nested_absmax(raw, b0, code, &groups, nbs, offset);
                    }
                    _ => arith::scale_values(Dtype::F32, raw, &mut self.scales),
                }
                let piece = dequant::bnb::FourBit {
                    kind: record.kind,
                    packed,
                    first: e0,
                    absmax: &self.scales,
                    blocksize: record.blocksize,
                    dtype: record.dtype,
                };
                dequant::bnb::four_bit_into(&piece, self.to, &mut self.values, out);
            }
            Kind::CtInt {
                codes,
                scale,
                zeros,
                g_idx,
                bits,
                packed,
                groups,
                per_tensor,
                group_size,
                block_rows,
            } => {
                let group_of = once(&self.shared.groups, || {
                    gptq_groups(g_idx.as_deref(), *groups, cols, *group_size)
                })?;
                let piece = ct_int_piece(
                    codes,
                    scale,
                    zeros.as_deref(),
                    *bits,
                    *packed,
                    *groups,
                    *per_tensor,
                    *block_rows,
                    r0,
                    r1,
                    cols,
                )?;
                let codes = match &piece.codes {
                    CtCodes::Unpacked(c) => dequant::packed::Codes::Unpacked(c),
                    CtCodes::Packed(words) => dequant::packed::Codes::Packed {
                        words,
                        per_row: to_usize(codes.shape[1])?,
                        bits: *bits,
                    },
                };
                let rows = dequant::packed::Rows {
                    codes,
                    cols: to_usize(cols)?,
                    scales: &piece.scales,
                    zeros: piece.zeros.as_deref(),
                    groups: to_usize(*groups)?,
                    group_of,
                    dtype: scale.dtype,
                };
                let (values, bytes) = (&mut self.values, &mut *out);
                dequant::packed::rows_into(&rows, self.to, values, bytes);
            }
            Kind::CtMxfp4 { weight, scale } => {
                let packed = read_elems(weight, r0 * cols / 2, count / 2)?;
                let per_row = cols / 32;
                let raw = read_elems(scale, r0 * per_row, to_usize((r1 - r0) * per_row)?)?;
                refuse_e8m0_nan(scale, r0 * per_row, &raw)?;
                let table = self.table.get_or_insert_with(dequant::mxfp4::Table::new);
                dequant::mxfp4::packed_rows(
                    &packed,
                    &raw,
                    to_usize(cols)?,
                    table,
                    &mut self.values,
                );
            }
            Kind::CtMxfp6 { weight, scale } => {
                let packed = read_elems(weight, r0 * cols / 4 * 3, count / 4 * 3)?;
                let per_row = cols / 32;
                let raw = read_elems(scale, r0 * per_row, to_usize((r1 - r0) * per_row)?)?;
                refuse_e8m0_nan(scale, r0 * per_row, &raw)?;
                dequant::mxfp4::fp6_packed_rows(&packed, &raw, to_usize(cols)?, &mut self.values);
            }
            Kind::Mxfp4 {
                blocks,
                scales,
                geometry,
            } => {
                if self.bands.is_none() {
                    self.bands = self.shared.bands.take();
                }
                let bands = self
                    .bands
                    .get_or_insert_with(|| super::mxfp4::Bands::new(*geometry));
                // The whole piece in one call: the vector kernel loads each
                // source row's block once for all its output rows. Stored
                // straight into `out` (through `values`, 8 rows at a time,
                // off the vector path).
                bands.rows(blocks, scales, r0, r1, self.to, &mut self.values, out)?;
            }
        }
        if !direct {
            dequant::store_f32(&self.values, self.to, out);
        }
        self.row = r1;
        Ok(())
    }
}

/// Weight `w` read as `to` in parts of whole rows, about `target` bytes
/// each, for readers side by side (`None` when it is one part). A part
/// starts at a multiple of the scheme's block of rows: an FP8 scale tile's
/// rows, an MXFP4 band's, else 128 (whole GPTQ/AWQ words of 8 packed rows, whole groups of
/// rows for the schemes that pack along them), so that no part re-reads
/// the scales or words of its neighbour. Each part reads only its own
/// rows' codes and scales, with positional reads; its bytes are those of
/// [`DequantReader::new`] over the same rows.
pub(crate) fn parts(w: &Weight, to: Dtype, target: u64) -> Option<Vec<BlockingPart>> {
    let [rows, cols] = w.shape;
    let row_bytes = cols.checked_mul(to.bits() / 8)?.max(1);
    if rows.checked_mul(row_bytes)? <= target {
        return None;
    }
    let align = match &*w.kind {
        Kind::Fp8 { tiling, .. } => tiling.rows.clamp(1, 1 << 16),
        // An MXFP4 reader holds a band of an expert's blocks: parts of
        // whole bands, so that no two readers read one. (Two part readers
        // peaked at 38 MiB when each also copied its pieces through a
        // buffer of its own; pieces are now made in the copy engine's.)
        Kind::Mxfp4 { geometry, .. } => super::mxfp4::Bands::part_rows(*geometry),
        // A part holds whole strips of GPTQ words (`STRIP_ROWS`, of which
        // a part reader's are `AHEAD_SHARE` x shorter), so that its reads
        // of a packed row are as long as the strip; `PART_STRIPS` of them,
        // so that all but the first are read ahead.
        Kind::Gptq { .. } => 128 * STRIP_ROWS / AHEAD_SHARE * PART_STRIPS,
        _ => 128,
    };
    let per_part = (target / row_bytes).max(1).next_multiple_of(align);
    let parts = parts_of(w, to, per_part);
    (parts.len() > 1).then_some(parts)
}

/// GPTQ's pieces: this many times the others' rows (see
/// [`DequantReader::rows`]).
const STRIP_ROWS: u64 = 8;

/// A GPTQ part reader's strips are this many times shorter than a whole
/// weight's reader's: it holds two, the one its pieces are made of and
/// the next, read ahead while the other part reader writes.
const AHEAD_SHARE: u64 = 2;

/// Strips a GPTQ part is made of when a piece is 128 rows (8192 columns).
const PART_STRIPS: u64 = 4;

/// The copy engine reads two parts at once (its `READERS`, a layer above):
/// each part reader takes pieces this many times smaller, so that the two
/// hold about what one whole-tensor reader held.
const PART_SHARE: u64 = 2;

/// Weight `w` read as `to` in parts of `per_part` rows (the last shorter).
fn parts_of(w: &Weight, to: Dtype, per_part: u64) -> Vec<BlockingPart> {
    let [rows, cols] = w.shape;
    let row_bytes = cols * (to.bits() / 8);
    let mut parts = Vec::new();
    let mut r0 = 0;
    // One group table for every part.
    let shared = Arc::<Shared>::default();
    while r0 < rows {
        let r1 = r0.saturating_add(per_part).min(rows);
        let (w, shared) = (w.clone(), shared.clone());
        // The part after the next: the one this part's thread takes when
        // the copy engine's readers keep pace.
        let later = r1.saturating_add(per_part.saturating_mul(PART_SHARE - 1));
        let then = (later < rows).then(|| later..later.saturating_add(per_part).min(rows));
        parts.push(BlockingPart {
            len: (r1 - r0) * row_bytes,
            open: Box::new(move || {
                let mut reader = DequantReader::rows(w, to, r0..r1);
                reader.shared = shared;
                reader.then = then;
                reader.step = match &*reader.w.kind {
                    // Made in the copy engine's chunk, whatever their rows
                    // (its band is what the part reader holds): a chunk a call.
                    Kind::Mxfp4 { .. } => reader.step,
                    // Strips of half the whole reader's rows (8 MiB of
                    // output: 512 rows of 8192 columns, reads of 2 KiB a
                    // packed row, 2 MiB of words), two held: the one its
                    // pieces are made of, and the next read ahead. Its
                    // pieces are cut to the copy engine's chunk whatever
                    // the strip.
                    Kind::Gptq { .. } => (reader.step / AHEAD_SHARE).max(1),
                    _ => (reader.step / PART_SHARE).max(1),
                };
                let r: crate::source::BlockingRead = Box::new(reader);
                Ok((r, crate::transform::Transform::Identity))
            }),
        });
        r0 = r1;
    }
    parts
}

impl DequantReader {
    /// The end of a GPTQ strip that starts at row `s0`: a piece's rows
    /// (`step`), within the weight and this reader's rows.
    fn strip_end(&self, s0: u64) -> u64 {
        let s1 = s0.saturating_add(self.step);
        s1.min(self.w.shape[0]).min(self.end)
    }

    /// Makes the GPTQ strip of rows `[s0, s1)` the held one: the one read
    /// ahead if it is that strip, by this reader or by one of an earlier
    /// part (its reads finished here), else read now into the buffers of
    /// the one read ahead, of the held one, or of a finished part. Of the
    /// buffers this reader had, one is the next ahead's, the other left.
    fn read_strip(&mut self, words: &StripOf, s0: u64, s1: u64) -> Result<()> {
        let mut mine = [self.ahead.take(), self.strip.take()];
        let begun = mine
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|s| s.is_begun(s0, s1)))
            .and_then(Option::take);
        let mut strip = match begun.or_else(|| self.shared.strips.take_begun(s0, s1)) {
            Some(strip) => strip,
            None => {
                let buffers = mine.iter_mut().find_map(Option::take);
                let strip = buffers.or_else(|| self.shared.strips.take_idle());
                let mut strip = strip.unwrap_or_default();
                strip.begin(words, s0, s1)?;
                strip
            }
        };
        strip.read_rest(words)?;
        self.strip = Some(strip);
        // Both kept when the strip came from another part: one is left.
        let (keep, extra) = match mine {
            [Some(a), b] => (Some(a), b),
            [None, b] => (b, None),
        };
        self.ahead = keep;
        self.shared.strips.give(extra);
        Ok(())
    }

    /// The strip to read ahead while the held one is made: the next of
    /// this part's, else the first of the part its thread likely reads
    /// next; `None` if there is none.
    fn next_strip(&self) -> Option<(u64, u64)> {
        let s0 = self.strip.as_ref()?.s1;
        if s0 < self.end.min(self.w.shape[0]) {
            return Some((s0, self.strip_end(s0)));
        }
        let then = self.then.as_ref()?;
        let s1 = then.start.saturating_add(self.step).min(then.end);
        (then.start < s1).then_some((then.start, s1.min(self.w.shape[0])))
    }

    /// While another part reader writes the output (this one's chunk is
    /// ready and would wait for that write: ext4 takes the file's lock for
    /// each), reads the next GPTQ strip ([`Self::next_strip`]), a packed
    /// row at a time, asking between reads. The reads were a burst of a
    /// thousand between two chunks, the output idle while both readers
    /// made theirs at once; here they take the place of the wait. A failed
    /// read ahead is left for the strip's own read to meet and report.
    fn read_ahead(&mut self, words: &StripOf) {
        if !crate::io_util::another_writes() {
            return;
        }
        let Some((s0, s1)) = self.next_strip() else {
            return;
        };
        let spare = &self.shared.strips;
        let ahead = self
            .ahead
            .get_or_insert_with(|| spare.take_idle().unwrap_or_default());
        let begun = ahead.is_begun(s0, s1);
        if !begun && (ahead.failed(s0, s1) || ahead.begin(words, s0, s1).is_err()) {
            return;
        }
        while ahead.reads_left() && crate::io_util::another_writes() {
            if ahead.read_next(words).is_err() {
                return;
            }
        }
    }
}

impl Read for DequantReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.bytes.len() {
            if self.row >= self.end.min(self.w.shape[0]) {
                return Ok(0);
            }
            let (r0, r1, len) = self.next_rows().map_err(Error::into_io)?;
            let row_bytes = len / usize::try_from(r1 - r0).unwrap_or(usize::MAX).max(1);
            // A caller's buffer that holds the whole piece, or whole units
            // of its rows, gets them made in place: no copy through
            // `bytes`. The copy engine's chunks are not a multiple of the
            // pieces: a whole piece only, once the first was made, would
            // go through `bytes` nearly every time.
            let unit = self.unit();
            let fit = (buf.len() / row_bytes.max(1)) as u64;
            let rows = match unit {
                Some(u) => (fit / u * u).min(r1 - r0),
                None if fit >= r1 - r0 => r1 - r0,
                None => 0,
            };
            if rows > 0 {
                let n = rows as usize * row_bytes;
                self.next_piece(r0 + rows, &mut buf[..n])
                    .map_err(Error::into_io)?;
                return Ok(n);
            }
            // Less than a unit left in the caller's buffer: one unit (or
            // the whole piece) through `bytes`.
            let end = unit.map_or(r1, |u| (r0 + u).min(r1));
            let len = (end - r0) as usize * row_bytes;
            let mut bytes = std::mem::take(&mut self.bytes);
            self.pos = 0;
            bytes.resize(len, 0);
            bytes.truncate(len);
            self.next_piece(end, &mut bytes).map_err(Error::into_io)?;
            self.bytes = bytes;
        }
        let n = (self.bytes.len() - self.pos).min(buf.len());
        buf[..n].copy_from_slice(&self.bytes[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// What the readers of one weight's parts share: tables made once a
/// weight, and GPTQ strips' buffers.
#[derive(Default)]
struct Shared {
    /// Each input column's group (GPTQ, compressed-tensors), made on the
    /// first piece, so that it is made (and `g_idx` read) about once a
    /// tensor.
    groups: OnceLock<Vec<u32>>,
    /// GPTQ's blocks of 32 columns in one group (the vector kernel's).
    runs: OnceLock<Vec<u32>>,
    /// The strips of finished part readers, taken by the next ones: a
    /// strip's 4 MiB of words were zeroed afresh by each part (3 % of a
    /// 1 GiB weight's CPU). At most two a reader at once (the held one
    /// and the one read ahead); one read ahead for a later part waits
    /// here, begun, for that part's reader ([`Spares::take_begun`]).
    strips: Spares<GptqStrip>,
    /// The MXFP4 bands of finished part readers, taken by the next ones: a
    /// band's 3 MiB of buffers were zeroed (and faulted in) afresh by each
    /// part. Those of one weight, so a band's `held` still says what its
    /// buffers hold. At most one a reader at once.
    bands: Spares<super::mxfp4::Bands>,
}

/// Buffers finished part readers leave for the next ones of the same
/// weight (at most one a reader at once).
struct Spares<T>(std::sync::Mutex<Vec<T>>);

impl<T> Default for Spares<T> {
    fn default() -> Self {
        Spares(std::sync::Mutex::new(Vec::new()))
    }
}

impl<T> Spares<T> {
    /// One a finished reader left, if any.
    fn take(&self) -> Option<T> {
        self.0.lock().ok()?.pop()
    }

    /// Leaves `spare` (if any) for the next reader.
    fn give(&self, spare: Option<T>) {
        if let (Some(spare), Ok(mut all)) = (spare, self.0.lock()) {
            all.push(spare);
        }
    }
}

impl Spares<GptqStrip> {
    /// One a finished reader left begun for rows `[s0, s1)`, if any.
    fn take_begun(&self, s0: u64, s1: u64) -> Option<GptqStrip> {
        let mut all = self.0.lock().ok()?;
        let at = all.iter().position(|s| s.is_begun(s0, s1))?;
        Some(all.swap_remove(at))
    }

    /// One a finished reader left, not one begun for a part's rows if
    /// another will do (its reads are kept for that part's reader).
    fn take_idle(&self) -> Option<GptqStrip> {
        let mut all = self.0.lock().ok()?;
        let last = all.len().checked_sub(1)?;
        let at = all.iter().position(|s| s.reads.is_none());
        Some(all.swap_remove(at.unwrap_or(last)))
    }
}

impl Drop for DequantReader {
    fn drop(&mut self) {
        self.shared.strips.give(self.strip.take());
        self.shared.strips.give(self.ahead.take());
        self.shared.bands.give(self.bands.take());
    }
}

/// A GPTQ weight's three matrices a strip is read from.
struct StripOf<'a> {
    qweight: &'a TensorAt,
    qzeros: &'a TensorAt,
    scales: &'a TensorAt,
    /// Codes a word.
    per: u64,
}

/// GPTQ's words, zero words and scales of output rows `[s0, s1)`: read at
/// once ([`GptqStrip::begin`], then [`GptqStrip::read_rest`]), or a
/// positional read at a time ([`GptqStrip::read_next`]) before the rest.
#[derive(Default)]
struct GptqStrip {
    s0: u64,
    s1: u64,
    /// The words: the first `lens[0]` hold this strip's (the buffer is
    /// kept from strip to strip, and only grows).
    qweight: Vec<u32>,
    /// The zero words: the first `lens[1]`.
    zeros: Vec<u32>,
    /// Then the scales' bytes: the first `lens[2]` of `raw`.
    lens: [usize; 3],
    zero_words: usize,
    scales: Vec<f32>,
    /// The scales' bytes as read.
    raw: Vec<u8>,
    /// The reads of a strip begun and not yet whole; `None` once it is.
    reads: Option<StripReads>,
}

/// A strip's positional reads, one a row of its three matrices (the
/// words', the zero words', the scales'): of each, the first column and
/// how many, and the rows; then how many of the reads are done.
struct StripReads {
    columns: [(u64, u64, u64); 3],
    done: u64,
    /// A read failed: the strip is read again when it is wanted, and that
    /// read reports the error.
    failed: bool,
}

impl StripReads {
    fn total(&self) -> u64 {
        self.columns.iter().map(|&(_, _, rows)| rows).sum()
    }
}

impl GptqStrip {
    /// Plans the reads of rows `[s0, s1)` into this one's buffers, sized
    /// for them: none is made yet.
    fn begin(&mut self, of: &StripOf, s0: u64, s1: u64) -> Result<()> {
        let nb = s1 - s0;
        let (z0, z1) = (s0 / of.per, (s1 - 1) / of.per + 1);
        let mut columns = [(s0, nb, 0), (z0, z1 - z0, 0), (s0, nb, 0)];
        for (i, p) in [of.qweight, of.qzeros, of.scales].into_iter().enumerate() {
            let (c0, n, rows) = &mut columns[i];
            *n = (*n).min(p.shape[1].saturating_sub(*c0));
            // No reads of no columns (a strip past the matrix's).
            *rows = if *n == 0 { 0 } else { p.shape[0] };
            let elems = to_usize(*rows)?
                .checked_mul(to_usize(*n)?)
                .ok_or_else(too_large)?;
            self.lens[i] = match i {
                2 => elems
                    .checked_mul(to_usize(width(p))?)
                    .ok_or_else(too_large)?,
                _ => elems,
            };
        }
        first_of(&mut self.qweight, self.lens[0]);
        first_of(&mut self.zeros, self.lens[1]);
        first_of(&mut self.raw, self.lens[2]);
        (self.s0, self.s1) = (s0, s1);
        self.zero_words = to_usize(z1 - z0)?;
        self.reads = Some(StripReads {
            columns,
            done: 0,
            failed: false,
        });
        Ok(())
    }

    /// Whether the reads of rows `[s0, s1)` are begun (and none failed).
    fn is_begun(&self, s0: u64, s1: u64) -> bool {
        let begun = self.reads.as_ref().is_some_and(|r| !r.failed);
        begun && (self.s0, self.s1) == (s0, s1)
    }

    /// Whether the reads of rows `[s0, s1)` were begun and one failed.
    fn failed(&self, s0: u64, s1: u64) -> bool {
        let failed = self.reads.as_ref().is_some_and(|r| r.failed);
        failed && (self.s0, self.s1) == (s0, s1)
    }

    /// Whether reads of the strip begun are left to make.
    fn reads_left(&self) -> bool {
        self.reads.as_ref().is_some_and(|r| r.done < r.total())
    }

    /// Makes the next of the strip's reads (it is begun, with reads left).
    fn read_next(&mut self, of: &StripOf) -> Result<()> {
        let Some(reads) = self.reads.as_mut() else {
            return Ok(());
        };
        let (mut i, mut row) = (0, reads.done);
        while i < 2 && row >= reads.columns[i].2 {
            row -= reads.columns[i].2;
            i += 1;
        }
        let (c0, n, _) = reads.columns[i];
        let (p, buf): (_, &mut [u8]) = match i {
            0 => (of.qweight, bytemuck::cast_slice_mut(&mut self.qweight)),
            1 => (of.qzeros, bytemuck::cast_slice_mut(&mut self.zeros)),
            _ => (of.scales, &mut self.raw),
        };
        let row_len = to_usize(n * width(p))?;
        let at = to_usize(row)? * row_len;
        let chunk = buf.get_mut(at..at + row_len).ok_or_else(too_large)?;
        let result = read_column_row(p, c0, n, row, chunk);
        match result {
            Ok(()) => reads.done += 1,
            Err(_) => reads.failed = true,
        }
        result
    }

    /// Makes the strip's reads left, then takes its words as
    /// little-endian and decodes its scales: the strip is whole.
    fn read_rest(&mut self, of: &StripOf) -> Result<()> {
        while self.reads_left() {
            self.read_next(of)?;
        }
        self.reads = None;
        for w in self.qweight[..self.lens[0]].iter_mut() {
            *w = u32::from_le(*w);
        }
        for w in self.zeros[..self.lens[1]].iter_mut() {
            *w = u32::from_le(*w);
        }
        decode_scales(of.scales.dtype, &self.raw[..self.lens[2]], &mut self.scales);
        Ok(())
    }
}

/// `raw` scales of `dtype` decoded into `out` (its length made theirs):
/// F16 and BF16 through the casts' vector path, the values
/// [`arith::scale_values`] gives (either cast to F32 is exact; perf put
/// that per-element decoding at 2 % of a GPTQ weight's CPU), the others by it.
fn decode_scales(dtype: Dtype, raw: &[u8], out: &mut Vec<f32>) {
    let Some(cast) = matches!(dtype, Dtype::F16 | Dtype::BF16)
        .then(|| crate::cast::Cast::new(dtype, Dtype::F32).ok())
        .flatten()
    else {
        return arith::scale_values(dtype, raw, out);
    };
    out.resize(raw.len() / 2, 0.0);
    cast.apply(&raw[..out.len() * 2], bytemuck::cast_slice_mut(out));
    // The cast stores little-endian words.
    for v in out.iter_mut() {
        *v = f32::from_bits(u32::from_le(v.to_bits()));
    }
}

/// The value `cell` holds, made by `make` if it holds none yet (two part
/// readers that both find it empty make the same table; one is kept).
fn once<T>(cell: &OnceLock<T>, make: impl FnOnce() -> Result<T>) -> Result<&T> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let v = make()?;
    Ok(cell.get_or_init(|| v))
}

/// The first `n` elements of `buf`, grown (zeroed) to hold them if it is
/// shorter: a buffer kept from piece to piece is zeroed once, not each time
/// it is read into.
fn first_of<T: Copy + Default>(buf: &mut Vec<T>, n: usize) -> &mut [T] {
    if buf.len() < n {
        buf.resize(n, T::default());
    }
    &mut buf[..n]
}

fn to_usize(v: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| too_large())
}

fn width(p: &TensorAt) -> u64 {
    p.dtype.bits() / 8
}

fn scale_elems(p: &TensorAt) -> u64 {
    p.shape.iter().product()
}

/// `count` elements of `p` from element `first`, as bytes (checked to lie in its span).
fn read_elems(p: &TensorAt, first: u64, count: usize) -> Result<Vec<u8>> {
    owned(|buf| Ok(read_elems_in(p, first, count, buf)?.len()))
}

/// The bytes a `*_in` reader puts at the front of a buffer of their own:
/// `fill` answers how many (a fresh buffer is sized to exactly those).
fn owned(fill: impl FnOnce(&mut Vec<u8>) -> Result<usize>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let n = fill(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// [`read_elems`] into the front of `buf` (kept by the caller from piece
/// to piece): those bytes.
fn read_elems_in<'a>(
    p: &TensorAt,
    first: u64,
    count: usize,
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8]> {
    let w = width(p);
    let len = count as u64 * w;
    if (first * w)
        .checked_add(len)
        .is_none_or(|end| end > p.span.len)
    {
        return Err(short(p));
    }
    let buf = first_of(buf, to_usize(len)?);
    p.span
        .bytes
        .read_exact_at(buf, p.span.offset + first * w)
        .map_err(|e| Error::io(e).with_tensor(&p.name))?;
    Ok(buf)
}

fn short(p: &TensorAt) -> Error {
    let e = QuantError::Shape {
        scheme: "read",
        actual: p.shape.clone(),
        expected: "a tensor as long as its shape".into(),
    };
    Error::new(ErrorKind::Quantized(e)).with_tensor(&p.name)
}

/// From every row of the matrix `p`, the bytes of columns `[c0, c0 + n)`, row after row.
fn read_column_bytes(p: &TensorAt, c0: u64, n: u64) -> Result<Vec<u8>> {
    owned(|buf| Ok(read_column_bytes_in(p, c0, n, buf)?.len()))
}

/// [`read_column_bytes`] into the front of `buf` (kept by the caller): those bytes.
fn read_column_bytes_in<'a>(
    p: &TensorAt,
    c0: u64,
    n: u64,
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8]> {
    let [rows, cols] = [p.shape[0], p.shape[1]];
    let n = n.min(cols.saturating_sub(c0));
    let len = to_usize(rows)?
        .checked_mul(to_usize(n * width(p))?)
        .ok_or_else(too_large)?;
    let buf = first_of(buf, len);
    read_column_bytes_into(p, c0, n, buf)?;
    Ok(buf)
}

/// [`read_column_bytes`] into `buf`, `rows * n` elements of `p` long.
fn read_column_bytes_into(p: &TensorAt, c0: u64, n: u64, buf: &mut [u8]) -> Result<()> {
    let row_len = to_usize(n * width(p))?;
    for (r, chunk) in buf.chunks_exact_mut(row_len.max(1)).enumerate() {
        read_column_row(p, c0, n, r as u64, chunk)?;
    }
    Ok(())
}

/// Of row `r` of the matrix `p`, the bytes of columns `[c0, c0 + n)` into
/// `chunk`, as long as them.
fn read_column_row(p: &TensorAt, c0: u64, n: u64, r: u64, chunk: &mut [u8]) -> Result<()> {
    let w = width(p);
    let at = (r * p.shape[1] + c0) * w;
    if at + n * w > p.span.len {
        return Err(short(p));
    }
    p.span
        .bytes
        .read_exact_at(chunk, p.span.offset + at)
        .map_err(|e| Error::io(e).with_tensor(&p.name))
}

/// [`read_column_bytes`] of an I32 matrix, as words: read into the words
/// themselves (no second buffer), then taken as little-endian.
fn read_columns(p: &TensorAt, c0: u64, n: u64) -> Result<Vec<u32>> {
    let mut words = Vec::new();
    let len = read_columns_in(p, c0, n, &mut words)?;
    words.truncate(len);
    Ok(words)
}

/// [`read_columns`] into the front of `words` (kept by the caller): how
/// many words were read.
fn read_columns_in(p: &TensorAt, c0: u64, n: u64, words: &mut Vec<u32>) -> Result<usize> {
    let [rows, cols] = [p.shape[0], p.shape[1]];
    let n = n.min(cols.saturating_sub(c0));
    let len = to_usize(rows)?
        .checked_mul(to_usize(n)?)
        .ok_or_else(too_large)?;
    let words = first_of(words, len);
    read_column_bytes_into(p, c0, n, bytemuck::cast_slice_mut(words))?;
    for w in words.iter_mut() {
        *w = u32::from_le(*w);
    }
    Ok(len)
}

/// A piece of a compressed-tensors integer weight: codes, scales and zero
/// points of its rows, unpacked.
struct CtIntPiece {
    codes: CtCodes,
    scales: Vec<f32>,
    zeros: Option<Vec<i8>>,
}

/// A piece's codes: one a byte, or the packed words as read.
enum CtCodes {
    Unpacked(Vec<i8>),
    Packed(Vec<u32>),
}

/// Reads rows `[r0, r1)` of a compressed-tensors integer weight.
#[allow(clippy::too_many_arguments)]
fn ct_int_piece(
    codes: &TensorAt,
    scale: &TensorAt,
    zeros: Option<&TensorAt>,
    bits: u32,
    packed: bool,
    groups: u64,
    per_tensor: bool,
    block_rows: u64,
    r0: u64,
    r1: u64,
    cols: u64,
) -> Result<CtIntPiece> {
    let nrows = r1 - r0;
    let count = to_usize(nrows * cols)?;
    let codes = if packed {
        let words = codes.shape[1];
        let raw = read_elems(codes, r0 * words, to_usize(nrows * words)?)?;
        CtCodes::Packed(words_of(&raw))
    } else {
        let raw = read_elems(codes, r0 * cols, count)?;
        CtCodes::Unpacked(raw.into_iter().map(|b| b as i8).collect())
    };
    let mut scales = Vec::new();
    if per_tensor {
        arith::scale_values(scale.dtype, &read_elems(scale, 0, 1)?, &mut scales);
        scales = vec![scales[0]; to_usize(nrows)?];
    } else {
        let raw = read_blocks(scale, groups, block_rows, r0, r1)?;
        arith::scale_values(scale.dtype, &raw, &mut scales);
    }
    let zeros = match zeros {
        None => None,
        // One zero point, unpacked, as the one scale.
        Some(z) if per_tensor => Some(vec![read_elems(z, 0, 1)?[0] as i8; to_usize(nrows)?]),
        // A block's zero point, unpacked, as its scale.
        Some(z) if block_rows > 1 => {
            let raw = read_blocks(z, groups, block_rows, r0, r1)?;
            Some(raw.into_iter().map(|b| b as i8).collect())
        }
        Some(z) if packed => {
            let b = u64::from(bits);
            let (w0, w1) = (r0 * b / 32, (r1 * b).div_ceil(32));
            let raw = read_elems(z, w0 * groups, to_usize((w1 - w0) * groups)?)?;
            let mut out = vec![0i8; to_usize(nrows * groups)?];
            dequant::packed::unpack_zeros(&words_of(&raw), to_usize(groups)?, bits, r0, &mut out);
            Some(out)
        }
        Some(z) => {
            let raw = read_elems(z, r0 * groups, to_usize(nrows * groups)?)?;
            Some(raw.into_iter().map(|b| b as i8).collect())
        }
    };
    Ok(CtIntPiece {
        codes,
        scales,
        zeros,
    })
}

/// The elements of rows `[r0, r1)` of a weight, row after row, from `p`,
/// a table of `groups` columns with a row for each `block_rows` of the
/// weight's (1: a row each): each of its rows read once, then repeated.
fn read_blocks(p: &TensorAt, groups: u64, block_rows: u64, r0: u64, r1: u64) -> Result<Vec<u8>> {
    let (s0, s1) = (r0 / block_rows, r1.div_ceil(block_rows));
    let raw = read_elems(p, s0 * groups, to_usize((s1 - s0) * groups)?)?;
    if block_rows == 1 {
        return Ok(raw);
    }
    let row_bytes = raw.len() / to_usize(s1 - s0)?.max(1);
    let row = |r: u64| (r / block_rows - s0) as usize * row_bytes;
    Ok((r0..r1)
        .flat_map(|r| &raw[row(r)..row(r) + row_bytes])
        .copied()
        .collect())
}

/// Refuses an E8M0 scale of 0xFF (NaN) among `raw`, elements of `p` from
/// element `first`: a scale a scheme multiplies by must be a number.
fn refuse_e8m0_nan(p: &TensorAt, first: u64, raw: &[u8]) -> Result<()> {
    let Some(i) = raw.iter().position(|&b| b == arith::E8M0_NAN) else {
        return Ok(());
    };
    let e = QuantError::Unsupported(format!(
        "{}: E8M0 scale {} is 0xFF, NaN",
        p.name,
        first + i as u64
    ));
    Err(Error::new(ErrorKind::Quantized(e))
        .with_tensor(&p.name)
        .at_offset(p.span.offset + first + i as u64))
}

/// Little-endian words.
fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Each input column's group: `g_idx` (every entry checked against the
/// scales' `groups`), else column / `group_size`.
fn gptq_groups(g_idx: Option<&TensorAt>, groups: u64, k: u64, group_size: u64) -> Result<Vec<u32>> {
    let Some(g) = g_idx else {
        return (0..k)
            .map(|c| u32::try_from(c / group_size.max(1)).map_err(|_| too_large()))
            .collect();
    };
    let raw = read_elems(g, 0, to_usize(k)?)?;
    raw.chunks_exact(4)
        .enumerate()
        .map(|(column, b)| {
            let value = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            match u32::try_from(value) {
                Ok(v) if u64::from(v) < groups => Ok(v),
                _ => {
                    let e = QuantError::GroupIndex {
                        column: column as u64,
                        value: i64::from(value),
                        groups,
                    };
                    Err(Error::new(ErrorKind::Quantized(e))
                        .with_tensor(&g.name)
                        .at_offset(g.span.offset + column as u64 * 4))
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::safetensors::SafetensorsSource;
    use crate::source::Source;

    fn read_all(mut r: DequantReader) -> Vec<u8> {
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        out
    }

    /// `r` read `chunk` bytes a call: pieces made through the reader's own
    /// buffer (a chunk shorter than a piece) or in the caller's.
    fn read_in(mut r: DequantReader, chunk: usize) -> Vec<u8> {
        let (mut out, mut buf) = (Vec::new(), vec![0u8; chunk]);
        loop {
            match r.read(&mut buf).unwrap() {
                0 => return out,
                n => out.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// GPTQ readers that read each next strip ahead (as they do while
    /// another part reader writes) give the bytes of one that does not,
    /// whatever the strips and pieces, also when a piece straddles a
    /// strip's end (the strip read ahead is then not the one wanted); and
    /// a read ahead that fails is met again, and reported, by the strip's
    /// own read.
    #[test]
    fn gptq_strips_read_ahead_give_the_same_bytes_and_errors() {
        for case in ["gptq", "gptq-8bit-v2"] {
            let path = format!("fixtures/quantized/{case}/model.safetensors");
            let src = SafetensorsSource::open(std::path::Path::new(&path)).unwrap();
            let sources: Vec<Box<dyn Source>> = vec![Box::new(src)];
            let found = super::super::recognize(&sources).unwrap();
            for (_, _, w) in &found.weights {
                let whole = read_all(DequantReader::new(w.clone(), Dtype::F32));
                let eight_rows = 8 * w.shape[1] as usize * 4;
                crate::io_util::while_another_writes(|| {
                    for (step, chunk) in [(1, 5), (3, 1 << 20), (12, eight_rows), (64, 5)] {
                        let mut r = DequantReader::new(w.clone(), Dtype::F32);
                        r.step = step;
                        let got = read_in(r, chunk);
                        assert!(got == whole, "{case} {} strips of {step}", w.name);
                    }
                    let mut joined = Vec::new();
                    for part in parts_of(w, Dtype::F32, 24) {
                        let (mut r, _) = (part.open)().unwrap();
                        r.read_to_end(&mut joined).unwrap();
                    }
                    assert!(joined == whole, "{case} {} in parts", w.name);
                });
                // The last packed row a byte short: the last strip's read fails.
                let mut kind = (*w.kind).clone();
                let Kind::Gptq { qweight, .. } = &mut kind else {
                    panic!("{case} is GPTQ")
                };
                qweight.span.len -= 1;
                let short = Weight {
                    kind: Arc::new(kind),
                    ..w.clone()
                };
                let failure = |ahead: bool| {
                    let mut r = DequantReader::new(short.clone(), Dtype::F32);
                    r.step = 3;
                    let mut out = Vec::new();
                    let e = match ahead {
                        true => crate::io_util::while_another_writes(|| r.read_to_end(&mut out)),
                        false => r.read_to_end(&mut out),
                    };
                    (e.unwrap_err().to_string(), out.len())
                };
                assert_eq!(failure(true), failure(false), "{case} {}", w.name);
            }
        }
    }

    #[test]
    fn scales_decode_as_scale_values_does() {
        // Every F16 and BF16 pattern (NaN payloads, subnormals, signed
        // zeros), and an odd count; F32 and E4M3 go through scale_values.
        let every: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        for (dtype, raw) in [
            (Dtype::F16, &every[..]),
            (Dtype::BF16, &every[..]),
            (Dtype::F16, &every[..14]),
            (Dtype::F32, &every[..]),
            (Dtype::F8_E4M3, &every[..256]),
        ] {
            let (mut want, mut got) = (Vec::new(), vec![7.0; 3]);
            arith::scale_values(dtype, raw, &mut want);
            decode_scales(dtype, raw, &mut got);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{dtype}");
        }
    }

    #[test]
    fn pieces_and_parts_of_any_size_give_the_same_bytes() {
        for case in [
            "fp8-block",
            "gptq",
            "gptq-8bit-v2",
            "awq",
            "bnb-int8",
            "fp8-compressed-tensors",
            "mxfp4",
            "pack-quantized",
            "int-quantized",
        ] {
            let path = format!("fixtures/quantized/{case}/model.safetensors");
            let src = SafetensorsSource::open(std::path::Path::new(&path)).unwrap();
            let sources: Vec<Box<dyn Source>> = vec![Box::new(src)];
            let found = super::super::recognize(&sources).unwrap();
            assert!(!found.weights.is_empty(), "{case}");
            for (_, _, w) in &found.weights {
                let whole = read_all(DequantReader::new(w.clone(), Dtype::F32));
                assert_eq!(whole.len() as u64, w.shape[0] * w.shape[1] * 4);
                for chunk in [5, 1 << 20] {
                    let r = DequantReader::new(w.clone(), Dtype::F32);
                    assert_eq!(
                        read_in(r, chunk),
                        whole,
                        "{case} {} read {chunk} a call",
                        w.name
                    );
                }
                if let Kind::Mxfp4 { geometry, .. } = &*w.kind {
                    // Bands of one block column: each piece copied out of whole-row reads.
                    let mut r = DequantReader::new(w.clone(), Dtype::F32);
                    r.bands = Some(super::super::mxfp4::Bands::narrow(*geometry, 1));
                    r.step = 5;
                    assert_eq!(read_all(r), whole, "{case} {} in bands of 1", w.name);
                }
                for rows in [1, 3, 128] {
                    let mut joined = Vec::new();
                    for part in parts_of(w, Dtype::F32, rows) {
                        let (mut r, _) = (part.open)().unwrap();
                        let before = joined.len();
                        r.read_to_end(&mut joined).unwrap();
                        assert_eq!((joined.len() - before) as u64, part.len);
                    }
                    assert_eq!(joined, whole, "{case} {} in parts of {rows} rows", w.name);
                }
                for step in [1, 3, 7] {
                    let mut r = DequantReader::new(w.clone(), Dtype::F32);
                    r.step = step;
                    assert_eq!(
                        read_all(r),
                        whole,
                        "{case} {} in pieces of {step} rows",
                        w.name
                    );
                }
            }
        }
    }
}
