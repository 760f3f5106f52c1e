//! The 4-bit schemes' kernels on AVX2 (bitsandbytes NF4/FP4, GPTQ int4,
//! MXFP4): 8 codes at a time, each value the reference's (`dequant::bnb`,
//! `dequant::gptq`, `dequant::mxfp4`) in its order of operations, rounded
//! once as the reference rounds it. Code books are looked up with two
//! 8-lane permutes, per-group values with gathers: lookups are exact, so
//! only the arithmetic around them needs care, and it is the reference's.
//!
//! The layouts whose codes run down the packed matrix (GPTQ: 8 input
//! columns a word, output rows side by side; gpt-oss MXFP4: the expert
//! transposed) take 8 or 16 output rows at once: their words are one
//! load (GPTQ) or a 16-byte block a row transposed in registers (MXFP4), and each code position of them is
//! a vector across the rows. GPTQ transposes those in registers to store
//! rows, or, stored as a 16-bit dtype where 32 columns share a group,
//! looks each row's values up in a table of the group's 16 (made by the
//! same lane operations, so the same bits) with byte shuffles, no
//! arithmetic a value; transposed MXFP4's vectors already are output rows. All store the output dtype from the register, by the store
//! path's own lane conversions, with no `f32` buffer between. The bitsandbytes
//! blocks the reader takes are `books`' (every width); the `four_bit` here
//! is the `f32` one the reference path's tails use.

use std::arch::x86_64::*;

use super::avx2::{
    book16, f16_lanes, half_lanes, look_up, put_rounded, put_rounded2, rounded, srli, store,
    stored_as,
};
use super::{AwqRow, Int4Tile as Tile, MIXED};
use crate::Dtype;

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn put(out: &mut [f32], v: __m256) {
    let values: [f32; 8] = bytemuck::cast(v);
    out[..8].copy_from_slice(&values);
}

/// The first 8 values of `v` as a vector.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn eight(v: &[f32]) -> __m256 {
    let a: [f32; 8] = v[..8].try_into().expect("8 values");
    bytemuck::cast(a)
}

/// `book[i]` for each lane's `i` (0 to 15), as `f32`s.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn look_up_in(book: &[f32; 16], i: __m256i) -> __m256 {
    _mm256_castsi256_ps(look_up(&book16(book), i))
}

/// `v` rounded as `ROUND` says, into `out`'s first 8 values.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn put_stored<const ROUND: u8>(out: &mut [f32], v: __m256) {
    put(
        out,
        _mm256_castsi256_ps(stored_as::<ROUND>(_mm256_castps_si256(v))),
    );
}

/// The 8 nibbles of 4 bytes `b`, in element order: each byte's high
/// nibble first (`HIGH_FIRST`, bitsandbytes) or its low one (MXFP4).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn nibbles<const HIGH_FIRST: bool>(b: &[u8]) -> __m256i {
    let word = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let shifts = if HIGH_FIRST {
        _mm256_setr_epi32(4, 0, 12, 8, 20, 16, 28, 24)
    } else {
        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)
    };
    let v = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);
    _mm256_and_si256(v, _mm256_set1_epi32(0xf))
}

/// bitsandbytes 4-bit: `book[q] * absmax`, rounded as `dtype` stores it,
/// for the elements of `out` from `packed`'s first byte on (high nibble
/// first), one absmax for all. Whole runs of 8; returns how many it did.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn four_bit(
    book: &[f32; 16],
    packed: &[u8],
    absmax: f32,
    dtype: Dtype,
    out: &mut [f32],
) -> usize {
    by_dtype!(dtype, four_bit_as(book, packed, absmax, out), 0)
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn four_bit_as<const ROUND: u8>(
    book: &[f32; 16],
    packed: &[u8],
    absmax: f32,
    out: &mut [f32],
) -> usize {
    let book = book16(book);
    let scale = _mm256_set1_ps(absmax);
    let mut done = 0;
    for (b, o) in packed.chunks_exact(4).zip(out.chunks_exact_mut(8)) {
        let v = _mm256_castsi256_ps(look_up(&book, nibbles::<true>(b)));
        put_stored::<ROUND>(o, _mm256_mul_ps(v, scale));
        done += 8;
    }
    done
}

/// GPTQ 4-bit, one output row: word `w` (at `words[w * stride]`) holds
/// input columns `8w..8w + 8`, low bits first; column `k` is in group
/// `groups[k]`, whose zero point and scale are `zeros[g]`, `scales[g]`;
/// each value `(q - zero) * scale` rounded as `dtype` stores it. Whole
/// words; returns the columns done.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn int4_row(
    words: &[u32],
    stride: usize,
    groups: &[u32],
    zeros: &[f32],
    scales: &[f32],
    dtype: Dtype,
    out: &mut [f32],
) -> usize {
    by_dtype!(
        dtype,
        int4_row_as(words, stride, groups, zeros, scales, out),
        0
    )
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn int4_row_as<const ROUND: u8>(
    words: &[u32],
    stride: usize,
    groups: &[u32],
    zeros: &[f32],
    scales: &[f32],
    out: &mut [f32],
) -> usize {
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let mut done = 0;
    for (w, (g, o)) in groups
        .chunks_exact(8)
        .zip(out.chunks_exact_mut(8))
        .enumerate()
    {
        let word = words[w * stride] as i32;
        let q = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts),
            _mm256_set1_epi32(0xf),
        );
        let (z, s) = super::pack4::group_values(zeros, scales, g);
        let v = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(q), z), s);
        put_stored::<ROUND>(o, v);
        done += 8;
    }
    done
}

/// GPTQ 4-bit, 8 output rows at once: word `w` of row `j` at
/// `words[w * stride + j]` (the 8 rows' words side by side in the packed
/// matrix, one 32-byte load), holding input columns `8w..8w + 8`, low bits
/// first; column `k` is in group `groups[k]`, whose zero points and scales
/// for the 8 rows are `zeros[8g..8g + 8]`, `scales[8g..8g + 8]`. Each
/// value `(q - zero) * scale` rounded as `dtype` stores it, as
/// [`int4_row`] computes it: a column of 8 rows at a time (no gather, as
/// each group's values are a vector across the rows), then transposed in
/// registers and stored as `to` (F32, BF16 or F16, little-endian) by the
/// store path's own lane conversions. `out` holds the 8 rows of
/// `groups.len()` elements of `to`. Whole words; returns the columns done
/// in each row.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn int4_rows8(t: &Tile, dtype: Dtype, to: Dtype, out: &mut [u8]) -> usize {
    by_dtypes!(dtype, to, int4_rows8_as(t, out), 0)
}

/// `ROUND`: the scales' dtype (0 F32, 1 BF16, 2 F16); `OUT`: the output's.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn int4_rows8_as<const ROUND: u8, const OUT: u8>(t: &Tile, out: &mut [u8]) -> usize {
    let width = if OUT == 0 { 4 } else { 2 };
    if out.len() < 8 * t.groups.len() * width {
        return 0;
    }
    // Finite scales make no NaN (`q - zero` is a small integer): the lanes
    // skip the NaN patches.
    match t.scales.iter().fold(true, |all, s| all & s.is_finite()) {
        true => int4_tile::<ROUND, OUT, true>(t, out),
        false => int4_tile::<ROUND, OUT, false>(t, out),
    }
}

/// [`int4_rows8_as`], its values known not to be NaN if `CLEAN`. Stored
/// as a 16-bit dtype, 64 columns at a time are looked up (see
/// [`looked_up`]) where each 32 of them are in one group; the rest, and
/// F32, computed a column of rows at a time ([`computed`]).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn int4_tile<const ROUND: u8, const OUT: u8, const CLEAN: bool>(t: &Tile, out: &mut [u8]) -> usize {
    let n = t.groups.len() / 8;
    let mut w = 0;
    if OUT != 0 {
        let mut books = Books::default();
        while w + 8 <= n {
            let run = |b: usize| t.runs.get(b).copied().unwrap_or(MIXED);
            let (ga, gb) = (run(w / 4), run(w / 4 + 1));
            if ga == MIXED || gb == MIXED {
                computed::<ROUND, OUT, CLEAN>(t, w, w + 8, out);
            } else {
                let a = match books.find(ga) {
                    Some(a) => a,
                    None => books.make::<ROUND, OUT, CLEAN>(t, ga, books.find(gb)),
                };
                let b = match books.find(gb) {
                    Some(b) => b,
                    None => books.make::<ROUND, OUT, CLEAN>(t, gb, Some(a)),
                };
                looked_up(t, w, &books.books[a], &books.books[b], out);
            }
            w += 8;
        }
    }
    computed::<ROUND, OUT, CLEAN>(t, w, n, out);
    8 * n
}

/// Words `[w, end)` of the tile's 8 rows: two words' columns of the rows
/// at a time ([`int4_columns`]), transposed in registers, each row's 16
/// values one store; then the last word.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn computed<const ROUND: u8, const OUT: u8, const CLEAN: bool>(
    t: &Tile,
    mut w: usize,
    end: usize,
    out: &mut [u8],
) {
    let width = if OUT == 0 { 4 } else { 2 };
    let cols = t.groups.len();
    while w + 2 <= end {
        let a = transpose8(int4_columns::<ROUND, CLEAN>(t, w));
        let b = transpose8(int4_columns::<ROUND, CLEAN>(t, w + 1));
        for (j, (a, b)) in a.into_iter().zip(b).enumerate() {
            let at = (j * cols + 8 * w) * width;
            let (a, b) = (_mm256_castps_si256(a), _mm256_castps_si256(b));
            put_rounded2::<ROUND, OUT, CLEAN>(a, b, &mut out[at..]);
        }
        w += 2;
    }
    if w < end {
        for (j, row) in transpose8(int4_columns::<ROUND, CLEAN>(t, w))
            .into_iter()
            .enumerate()
        {
            let at = (j * cols + 8 * w) * width;
            put_rounded::<ROUND, OUT, CLEAN>(_mm256_castps_si256(row), &mut out[at..]);
        }
    }
}

/// One group's 16 possible values in each of the tile's 8 rows, as the
/// 16-bit output: row `j`'s low bytes (`[j][0]`) and high bytes (`[j][1]`)
/// by code, each 16 bytes repeated in both halves of the register (the
/// byte shuffle looks up within each half).
type Book = [[__m256i; 2]; 8];

/// The books of the last two groups looked up in, and their groups.
struct Books {
    groups: [u32; 2],
    books: [Book; 2],
}

impl Default for Books {
    fn default() -> Self {
        let zero: __m256i = bytemuck::Zeroable::zeroed();
        Books {
            groups: [MIXED; 2],
            books: [[[zero; 2]; 8]; 2],
        }
    }
}

impl Books {
    fn find(&self, g: u32) -> Option<usize> {
        self.groups.iter().position(|&h| h == g)
    }

    /// Group `g`'s book made into a slot other than `keep`'s: each row's
    /// `(q - zero) * scale` for the 16 codes `q`, rounded and stored as
    /// [`computed`] does it (the same operations on the same operands, so
    /// the same bits, NaN payloads included), split into low and high
    /// bytes. Returns the slot.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn make<const ROUND: u8, const OUT: u8, const CLEAN: bool>(
        &mut self,
        t: &Tile,
        g: u32,
        keep: Option<usize>,
    ) -> usize {
        let at = usize::from(keep == Some(0));
        // `packus` interleaves the halves of its two operands: codes 0..8
        // in the low half, 8..16 in the high one.
        let qa = _mm256_setr_ps(0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0);
        let qb = _mm256_setr_ps(4.0, 5.0, 6.0, 7.0, 12.0, 13.0, 14.0, 15.0);
        // Within each half: the 8 low bytes, then the 8 high ones.
        let split = _mm256_setr_epi8(
            0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3,
            5, 7, 9, 11, 13, 15,
        );
        let first = g as usize * 8;
        let values = |q: __m256, z: __m256, s: __m256| {
            let v = _mm256_castps_si256(_mm256_mul_ps(_mm256_sub_ps(q, z), s));
            half_lanes::<ROUND, OUT, CLEAN>(rounded::<ROUND, CLEAN>(v))
        };
        for (j, book) in self.books[at].iter_mut().enumerate() {
            let z = _mm256_set1_ps(t.zeros[first + j]);
            let s = _mm256_set1_ps(t.scales[first + j]);
            let halves = _mm256_packus_epi32(values(qa, z, s), values(qb, z, s));
            let bytes = _mm256_shuffle_epi8(halves, split);
            *book = [
                _mm256_permute4x64_epi64::<0b10_00_10_00>(bytes),
                _mm256_permute4x64_epi64::<0b11_01_11_01>(bytes),
            ];
        }
        self.groups[at] = g;
        at
    }
}

/// Words `w..w + 8` (64 columns) of the tile's 8 rows, columns `8w..8w +
/// 32` looked up in book `a`, the next 32 in `b`, stored as 16-bit values.
/// A row's 8 words are gathered into one register, the even words in its
/// low half and the odd ones in its high half: then each nibble is a byte
/// index in the half of the register the byte shuffle looks up in, and
/// interleaving the looked-up low and high bytes puts 16 consecutive
/// columns in one register, in order. No arithmetic, 4 shuffles of
/// lookup and 4 of interleaving a row of 64.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn looked_up(t: &Tile, w: usize, a: &Book, b: &Book, out: &mut [u8]) {
    let cols = t.groups.len();
    // Rows 0..4 (`HIGH` false) or 4..8 of words `w + 2m`, `w + 2m + 1`.
    let pair = |m: usize, high: bool| {
        let half = |k: usize| {
            let at = (w + k) * t.stride + 4 * usize::from(high);
            let v: [u32; 4] = t.words[at..at + 4].try_into().expect("4 words");
            bytemuck::cast::<_, __m128i>(v)
        };
        _mm256_set_m128i(half(2 * m + 1), half(2 * m))
    };
    // The words of the rows 16 on, which the tile after next reads: its
    // cache lines fetched while this one computes. A strip's packed rows
    // lie 4 KiB and more apart (one page each), where no hardware
    // prefetcher follows, and by the time its later tiles come the
    // strip has left the cache (the output written since is larger).
    for k in 0..8 {
        let at = (w + k) * t.stride + 16;
        if let Some(word) = t.words.get(at) {
            prefetch(word);
        }
    }
    let nibble = _mm256_set1_epi8(0x0f);
    for high in [false, true] {
        let c: [__m256i; 4] = std::array::from_fn(|m| pair(m, high));
        let t0 = _mm256_unpacklo_epi32(c[0], c[1]);
        let t1 = _mm256_unpackhi_epi32(c[0], c[1]);
        let t2 = _mm256_unpacklo_epi32(c[2], c[3]);
        let t3 = _mm256_unpackhi_epi32(c[2], c[3]);
        let rows = [
            _mm256_unpacklo_epi64(t0, t2),
            _mm256_unpackhi_epi64(t0, t2),
            _mm256_unpacklo_epi64(t1, t3),
            _mm256_unpackhi_epi64(t1, t3),
        ];
        for (i, r) in rows.into_iter().enumerate() {
            let j = i + 4 * usize::from(high);
            let lo = _mm256_and_si256(r, nibble);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(r), nibble);
            let at = (j * cols + 8 * w) * 2;
            let out = &mut out[at..at + 128];
            for (k, (idx, book)) in [
                (_mm256_unpacklo_epi8(lo, hi), &a[j]),
                (_mm256_unpackhi_epi8(lo, hi), &b[j]),
            ]
            .into_iter()
            .enumerate()
            {
                let low = _mm256_shuffle_epi8(book[0], idx);
                let high = _mm256_shuffle_epi8(book[1], idx);
                store(&mut out[64 * k..], _mm256_unpacklo_epi8(low, high));
                store(&mut out[64 * k + 32..], _mm256_unpackhi_epi8(low, high));
            }
        }
    }
}

/// Columns `8w..8w + 8` of the tile's 8 rows, rounded as `ROUND` says:
/// lane `j` of column `s` is row `j`'s.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn int4_columns<const ROUND: u8, const CLEAN: bool>(t: &Tile, w: usize) -> [__m256; 8] {
    let word: [u32; 8] = t.words[w * t.stride..w * t.stride + 8]
        .try_into()
        .expect("8 words");
    let word: __m256i = bytemuck::cast(word);
    let g = &t.groups[8 * w..8 * w + 8];
    let mut columns = [_mm256_setzero_ps(); 8];
    for (s, c) in columns.iter_mut().enumerate() {
        let q = _mm256_and_si256(
            _mm256_srl_epi32(word, _mm_cvtsi32_si128(4 * s as i32)),
            _mm256_set1_epi32(0xf),
        );
        let at = g[s] as usize * 8;
        let (z, sc) = (eight(&t.zeros[at..]), eight(&t.scales[at..]));
        let v = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(q), z), sc);
        *c = _mm256_castsi256_ps(rounded::<ROUND, CLEAN>(_mm256_castps_si256(v)));
    }
    columns
}

/// MXFP4 packed along the row (compressed-tensors): for the elements of
/// `out` from `packed`'s first byte on (low nibble first), in blocks of 32
/// from a block's start, `book[scales[j]][q]` (a row of the reference's
/// table per scale). Whole runs of 8; returns how many it did.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn mxfp4_row(
    packed: &[u8],
    scales: &[u8],
    book: &[[f32; 16]; 256],
    out: &mut [f32],
) -> usize {
    let mut done = 0;
    for ((b, o), j) in packed
        .chunks_exact(4)
        .zip(out.chunks_exact_mut(8))
        .zip((0..).map(|i: usize| i / 4))
    {
        let Some(&e) = scales.get(j) else {
            break;
        };
        let row = &book[usize::from(e)];
        put(o, look_up_in(row, nibbles::<false>(b)));
        done += 8;
    }
    done
}

/// AutoAWQ 4-bit, one output row: input column `k`'s word at
/// `words[k * stride]`, its code the nibble at `shift`, in group
/// `k / group_size` of zero point `zeros[g]` and scale `scales[g]`; each
/// value `(q - zero) * scale` rounded as `dtype` stores it. Whole runs of
/// 8 columns; returns the columns done.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn awq_row(row: &AwqRow, dtype: Dtype, out: &mut [f32]) -> usize {
    by_dtype!(dtype, awq_row_as(row, out), 0)
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn awq_row_as<const ROUND: u8>(r: &AwqRow, out: &mut [f32]) -> usize {
    let shift = _mm_cvtsi32_si128(r.shift as i32);
    let mut done = 0;
    for (c, o) in out.chunks_exact_mut(8).enumerate() {
        let k: [usize; 8] = std::array::from_fn(|j| 8 * c + j);
        let w: [u32; 8] = k.map(|k| r.words[k * r.stride]);
        let q = _mm256_and_si256(
            _mm256_srl_epi32(bytemuck::cast(w), shift),
            _mm256_set1_epi32(0xf),
        );
        let group_size = r.group_size.max(1);
        let z: [f32; 8] = k.map(|k| r.zeros[k / group_size]);
        let s: [f32; 8] = k.map(|k| r.scales[k / group_size]);
        let diff = _mm256_sub_ps(_mm256_cvtepi32_ps(q), bytemuck::cast(z));
        let v = _mm256_mul_ps(diff, bytemuck::cast(s));
        put_stored::<ROUND>(o, v);
        done += 8;
    }
    done
}

/// gpt-oss MXFP4, transposed: output rows `[k0, k0 + out.len() / rows)`
/// of an expert whose `rows` source rows each hold `width` blocks
/// (`width * 16` bytes of `blocks`, low nibble first; `scales` block
/// column after block column, `[width][rows]`); output row `k`, column
/// `r` is `book[scale][code k of row r]`.
/// 8 codes of 8 source rows at a time, looked up then transposed in
/// registers. All or nothing: false (nothing written) unless `k0`, the
/// output rows and `rows` are multiples of 8.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn mxfp4_transposed(
    blocks: &[u8],
    scales: &[u8],
    width: usize,
    rows: usize,
    k0: usize,
    book: &[[f32; 16]; 256],
    out: &mut [f32],
) -> bool {
    let count = out.len() / rows.max(1);
    if k0 % 8 != 0 || count % 8 != 0 || rows % 8 != 0 || count * rows != out.len() {
        return false;
    }
    let row_bytes = width * 16;
    for kg in (0..count).step_by(8) {
        let k = k0 + kg;
        let (byte, block) = (k / 2, k / 32);
        for rb in (0..rows).step_by(8) {
            let v: [__m256; 8] = std::array::from_fn(|j| {
                let r = rb + j;
                let at = r * row_bytes + byte;
                let row = &book[usize::from(scales[block * rows + r])];
                look_up_in(row, nibbles::<false>(&blocks[at..at + 4]))
            });
            for (j, col) in transpose8(v).into_iter().enumerate() {
                let at = (kg + j) * rows + rb;
                put(&mut out[at..at + 8], col);
            }
        }
    }
    true
}

/// [`mxfp4_transposed`] stored as `to` (F32, BF16 or F16, little-endian)
/// straight into `out` (`out.len() / width` elements). No table lookup:
/// 16 source rows at a time, each row's 16-byte block loaded once and
/// transposed in registers into 4 words a lane (lane `j` holding 8 codes
/// of its row), so that each code position is a vector of 8 output
/// columns of one output row, and a block's 32 codes share the rows'
/// scales. Each value is the code's E2M1 value (magnitude permuted from
/// 8, the sign its bit 3) times the scale's factor `2^(e - 127)`, made
/// from the scale byte's bits (`e << 23`, 0 the subnormal `2^-127`, 0xFF
/// the infinity transformers makes of it): the table's `book[e][2]` (code
/// 2 being 1.0), the product exact, as the table's is (E2M1 has 2
/// significant bits, the factor is a power of two), or the same infinity,
/// or the same default NaN (`0 * inf`); the tests compare every scale and
/// code. A BF16 value's bits are the f32's high half (exact, so rounding
/// keeps them; a NaN is the default one, whose low half is zero). As
/// BF16, a tile's block whose scales are all 2 to 252 (every value normal
/// or zero) is made by [`bf16_by_exponent`] instead, 16-bit integer lanes
/// and byte shuffles, no multiply. Any `k0` and number of output rows;
/// all or nothing: false (nothing written) unless `rows` is a multiple of
/// 16.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn mxfp4_transposed_as(
    blocks: &[u8],
    scales: &[u8],
    width: usize,
    rows: usize,
    k0: usize,
    to: Dtype,
    out: &mut [u8],
) -> bool {
    let band = Band {
        blocks,
        scales,
        width,
        rows,
    };
    by_dtype!(to, mxfp4_transposed_out(&band, k0, out), false)
}

/// [`mxfp4_transposed_as`]'s band: `scales` block column after block
/// column (`[width][rows]`).
struct Band<'a> {
    blocks: &'a [u8],
    scales: &'a [u8],
    width: usize,
    rows: usize,
}

impl Band<'_> {
    /// Block `block` of rows `lo + step * i` (low half) and `hi + step * i`
    /// (high half), `i` 0 to 3, loaded 16 bytes a row: result `p`'s lane
    /// `j` is word `p` (codes `8p..8p + 8`) of the lane's row.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn words(&self, (lo, hi, step): (usize, usize, usize), block: usize) -> [__m256i; 4] {
        let row_bytes = self.width * 16;
        let load = |r: usize| -> __m128i {
            let at = r * row_bytes + block * 16;
            bytemuck::pod_read_unaligned(&self.blocks[at..at + 16])
        };
        let y: [__m256i; 4] =
            std::array::from_fn(|i| _mm256_set_m128i(load(hi + step * i), load(lo + step * i)));
        // A 4 x 4 transpose of 32-bit words in each half.
        let t0 = _mm256_unpacklo_epi32(y[0], y[1]);
        let t1 = _mm256_unpackhi_epi32(y[0], y[1]);
        let t2 = _mm256_unpacklo_epi32(y[2], y[3]);
        let t3 = _mm256_unpackhi_epi32(y[2], y[3]);
        [
            _mm256_unpacklo_epi64(t0, t2),
            _mm256_unpackhi_epi64(t0, t2),
            _mm256_unpacklo_epi64(t1, t3),
            _mm256_unpackhi_epi64(t1, t3),
        ]
    }

    /// The factors of block `block` of source rows `r..r + 16` as two
    /// vectors of 8 lanes, each lane's row as [`Lanes`] puts it, each
    /// beside its negation.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn factors(&self, r: usize, block: usize, lanes: Lanes) -> (Factor, Factor) {
        let at = block * self.rows + r;
        let e: __m128i = bytemuck::pod_read_unaligned(&self.scales[at..at + 16]);
        let e = match lanes {
            Lanes::Straight => e,
            // Rows 0-3 and 8-11 in the low 8 bytes, 4-7 and 12-15 high.
            Lanes::Packed => _mm_shuffle_epi8(
                e,
                _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15),
            ),
            // Even rows in the low 8 bytes, odd ones high.
            Lanes::Pairs => _mm_shuffle_epi8(
                e,
                _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15),
            ),
        };
        let factor = |e: __m128i| {
            let e = _mm256_cvtepu8_epi32(e);
            // 2^(e - 127) is e's bits as an exponent, but for e = 0: 2^-127,
            // a subnormal (0xFF: the infinity, as the table holds).
            let zero = _mm256_and_si256(
                _mm256_cmpeq_epi32(e, _mm256_setzero_si256()),
                _mm256_set1_epi32(0x0040_0000),
            );
            let f = _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32::<23>(e), zero));
            (f, _mm256_xor_ps(f, _mm256_set1_ps(-0.0)))
        };
        (factor(e), factor(_mm_srli_si128::<8>(e)))
    }
}

/// Which source rows of a tile of 16 the lanes of its two vectors hold,
/// and so how they are stored: `Straight`, rows 0-7 then 8-15 (F32, as
/// they are); `Packed`, rows 0-3 and 8-11 then 4-7 and 12-15, so that
/// packing them to 16 bits (`packus`, which interleaves 128-bit halves)
/// puts the rows in order (F16); `Pairs`, even rows then odd ones, so
/// that the first's high halves shifted down beside the second's make
/// the rows in order (BF16: one shift and one blend for 16 values).
#[derive(Clone, Copy)]
enum Lanes {
    Straight,
    Packed,
    Pairs,
}

impl Lanes {
    /// The two vectors' rows, as [`Band::words`] takes them.
    fn rows(self) -> [(usize, usize, usize); 2] {
        match self {
            Lanes::Straight => [(0, 4, 1), (8, 12, 1)],
            Lanes::Packed => [(0, 8, 1), (4, 12, 1)],
            Lanes::Pairs => [(0, 8, 2), (1, 9, 2)],
        }
    }
}

/// A lane's factor and its negation.
type Factor = (__m256, __m256);

/// Code `slot` (0 to 7) of each lane's word, its E2M1 value times
/// `factor`, as f32 bits: the magnitude permuted from the 8, times the
/// factor or its negation as the code's bit 3 says (the same product as
/// the signed value's times the factor, NaN included: `0 * inf` is the
/// default NaN whatever the signs).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e2m1_times(word: __m256i, slot: i32, factor: Factor) -> __m256i {
    let magnitude = _mm256_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0);
    let shifted = _mm256_srl_epi32(word, _mm_cvtsi32_si128(4 * slot));
    // The permute reads each lane's low 3 bits, the blend bit 31 (the
    // code's bit 3 shifted up): no masks.
    let m = _mm256_permutevar8x32_ps(magnitude, shifted);
    let sign = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(shifted));
    let f = _mm256_blendv_ps(factor.0, factor.1, sign);
    _mm256_castps_si256(_mm256_mul_ps(m, f))
}

/// What [`bf16_by_exponent`]'s table adds to a nonzero code's BF16 bits,
/// so that one unsigned `min` tells it from a zero: at least 16000, so that
/// each row's term `BF16_BIAS - ((e - 127) << 7)` is not negative for the
/// smallest scale (2); at most 16191, so that the largest magnitude
/// (6.0's 0x40C0) plus it stays under the sign bit. Every nonzero code's
/// sum (0.5's 0x3F00 and up, plus it) is then above every term.
const BF16_BIAS: u16 = 0x3F00;

/// The E2M1 codes as [`bf16_by_exponent`] looks them up: the value's BF16
/// bits (the sign at bit 15, code 8 being -0), plus [`BF16_BIAS`] when not
/// a zero; low bytes (`[0]`) and high bytes (`[1]`) by code.
const E2M1_BF16_BIASED: [[u8; 16]; 2] = {
    let magnitude = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    let mut t = [[0u8; 16]; 2];
    let mut code = 0;
    while code < 16 {
        // Exact: an E2M1 value has 2 significant bits.
        let bits = (magnitude[code % 8].to_bits() >> 16) as u16;
        let biased = if bits == 0 { 0 } else { bits + BF16_BIAS };
        let value = biased | ((code as u16 >> 3) << 15);
        t[0][code] = value as u8;
        t[1][code] = (value >> 8) as u8;
        code += 1;
    }
    t
};

impl Band<'_> {
    /// Whether every value of block `block` of source rows `r..r + 16` is
    /// a normal BF16 number or a zero: scales 2 to 252, for the codes'
    /// magnitudes 0.5 to 6 take the exponent `e - 127` to biased exponents
    /// `e - 1` to `e + 2` (1 to 254 allowed). Else (subnormal products,
    /// overflow to infinity, 0xFF) the float path makes them.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn bf16_normal(&self, r: usize, block: usize) -> bool {
        let at = block * self.rows + r;
        let e: __m128i = bytemuck::pod_read_unaligned(&self.scales[at..at + 16]);
        let clamped = _mm_min_epu8(_mm_max_epu8(e, _mm_set1_epi8(2)), _mm_set1_epi8(-4));
        _mm_movemask_epi8(_mm_cmpeq_epi8(clamped, e)) == 0xFFFF
    }

    /// Block `block` of source rows `r..r + 16`, bytes transposed: result
    /// `p` holds bytes `2p` and `2p + 1` (codes `4p..4p + 4`) of the rows,
    /// each byte of the rows a 64-bit quarter, rows `r..r + 8` in the low
    /// half and `r + 8..r + 16` in the high one: byte `2p` of the rows
    /// first in each half.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn columns(&self, r: usize, block: usize) -> [__m256i; 8] {
        let row_bytes = self.width * 16;
        let load = |r: usize| -> __m128i {
            let at = r * row_bytes + block * 16;
            bytemuck::pod_read_unaligned(&self.blocks[at..at + 16])
        };
        let z: [__m256i; 8] =
            std::array::from_fn(|i| _mm256_set_m128i(load(r + i + 8), load(r + i)));
        // Interleaving rows in pairs, fours, eights: bytes, then 16-bit
        // pairs of rows, then 32-bit fours (an 8 x 16 transpose a half).
        let a: [[__m256i; 2]; 4] = std::array::from_fn(|i| {
            let (x, y) = (z[2 * i], z[2 * i + 1]);
            [_mm256_unpacklo_epi8(x, y), _mm256_unpackhi_epi8(x, y)]
        });
        // `b[j][h]`: rows `4j..4j + 4` of bytes `8h..8h + 4`, `8h + 4..8h + 8`.
        let b: [[[__m256i; 2]; 2]; 2] = std::array::from_fn(|j| {
            std::array::from_fn(|h| {
                let (x, y) = (a[2 * j][h], a[2 * j + 1][h]);
                [_mm256_unpacklo_epi16(x, y), _mm256_unpackhi_epi16(x, y)]
            })
        });
        // Bytes `8h + 4g + 2m` and the next: result `4h + 2g + m`.
        std::array::from_fn(|p| {
            let (h, g, m) = (p / 4, p / 2 % 2, p % 2);
            let (x, y) = (b[0][h][g], b[1][h][g]);
            match m {
                0 => _mm256_unpacklo_epi32(x, y),
                _ => _mm256_unpackhi_epi32(x, y),
            }
        })
    }
}

/// Codes `[k, end)` (in block `block`) of source rows `rb..rb + 16` as
/// BF16, their block's scales all [`Band::bf16_normal`], into output rows
/// counted from `k0`. No float arithmetic: a code's value times `2^(e -
/// 127)` is exact and normal, so its BF16 bits are the code's with `e -
/// 127` added to the exponent field, `(e - 127) << 7` on the bits (a zero
/// kept as it is). Each code is looked up (byte shuffles, 32 a shuffle)
/// in [`E2M1_BF16_BIASED`], and each row's term `BF16_BIAS - ((e - 127)
/// << 7)` taken off a nonzero code's magnitude, nothing off a zero's:
/// `v - min(v & 0x7FFF, term)`, as the biased magnitude is 0 for a zero
/// and above every term otherwise. The same bits as the float path (the
/// tests compare every code under scales at and past the limits).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn bf16_by_exponent(
    b: &Band,
    (rb, block): (usize, usize),
    (k, end): (usize, usize),
    k0: usize,
    out: &mut [u8],
) {
    let at = block * b.rows + rb;
    let e: __m128i = bytemuck::pod_read_unaligned(&b.scales[at..at + 16]);
    let term = _mm256_sub_epi16(
        _mm256_set1_epi16((BF16_BIAS + (127 << 7)) as i16),
        _mm256_slli_epi16::<7>(_mm256_cvtepu8_epi16(e)),
    );
    let columns = b.columns(rb, block);
    let first = block * 32;
    let codes = Codes {
        term,
        rows: b.rows,
        rb,
        k0,
    };
    if k == first && end == first + 32 {
        codes.store::<true>(columns, first, (k, end), out);
    } else {
        codes.store::<false>(columns, first, (k, end), out);
    }
}

/// A tile's block as [`bf16_by_exponent`] stores it: its rows' terms,
/// and where its output goes (source rows `rb..rb + 16` of `rows`, output
/// rows counted from code `k0`).
struct Codes {
    term: __m256i,
    rows: usize,
    rb: usize,
    k0: usize,
}

impl Codes {
    /// Codes `[k, end)` of the block whose first code is `first`, its bytes
    /// as [`Band::columns`] makes them; `WHOLE`: the whole block, no code
    /// checked.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn store<const WHOLE: bool>(
        &self,
        columns: [__m256i; 8],
        first: usize,
        (k, end): (usize, usize),
        out: &mut [u8],
    ) {
        let book =
            |bytes: [u8; 16]| _mm256_broadcastsi128_si256(bytemuck::cast::<_, __m128i>(bytes));
        let (low, high) = (book(E2M1_BF16_BIASED[0]), book(E2M1_BF16_BIASED[1]));
        let (nibble, magnitude) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi16(0x7fff));
        for (p, y) in columns.into_iter().enumerate() {
            let code = first + 4 * p;
            if !WHOLE && (code + 4 <= k || code >= end) {
                continue;
            }
            // Low nibbles: codes `4p` and `4p + 2` of the rows; high: the odd.
            let nibbles = [
                _mm256_and_si256(y, nibble),
                _mm256_and_si256(_mm256_srli_epi16::<4>(y), nibble),
            ];
            for (odd, x) in nibbles.into_iter().enumerate() {
                let (l, h) = (_mm256_shuffle_epi8(low, x), _mm256_shuffle_epi8(high, x));
                let pair = [_mm256_unpacklo_epi8(l, h), _mm256_unpackhi_epi8(l, h)];
                for (second, v) in pair.into_iter().enumerate() {
                    let code = code + 2 * second + odd;
                    if !WHOLE && (code < k || code >= end) {
                        continue;
                    }
                    let taken = _mm256_min_epu16(_mm256_and_si256(v, magnitude), self.term);
                    let at = ((code - self.k0) * self.rows + self.rb) * 2;
                    store(&mut out[at..], _mm256_sub_epi16(v, taken));
                }
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn mxfp4_transposed_out<const OUT: u8>(b: &Band, k0: usize, out: &mut [u8]) -> bool {
    let w = if OUT == 0 { 4 } else { 2 };
    let rows = b.rows;
    let count = out.len() / w / rows.max(1);
    if rows % 16 != 0 || count * rows * w != out.len() {
        return false;
    }
    if b.blocks.len() < rows * b.width * 16 || b.scales.len() < rows * b.width {
        return false;
    }
    let lanes = match OUT {
        0 => Lanes::Straight,
        1 => Lanes::Pairs,
        _ => Lanes::Packed,
    };
    let [a_rows, c_rows] = lanes.rows();
    let k1 = k0 + count;
    let row_bytes = b.width * 16;
    // The first and last blocks' bytes of a row: the lines a tile reads.
    let (first, last) = (k0 / 32 * 16, (k1.max(k0 + 1) - 1) / 32 * 16);
    for rb in (0..rows).step_by(16) {
        // The lines of the tile after next: its rows are a band row apart
        // (480 bytes in gpt-oss's bands) and each is read for a few blocks,
        // not a stride the hardware's prefetcher follows.
        if rb + 2 * 16 < rows {
            for r in rb + 2 * 16..rb + 3 * 16 {
                let at = b.blocks.as_ptr().wrapping_add(r * row_bytes);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(first) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(last) as *const i8);
            }
        }
        // Output row `k`'s 16 values of this tile, from code `slot` of
        // words `xa` and `xc`.
        let put = |out: &mut [u8], k: usize, (xa, xc): (__m256i, __m256i), slot, (fa, fc)| {
            let (a, c) = (e2m1_times(xa, slot, fa), e2m1_times(xc, slot, fc));
            let at = ((k - k0) * rows + rb) * w;
            match OUT {
                0 => {
                    out[at..at + 32].copy_from_slice(bytemuck::bytes_of(&a));
                    out[at + 32..at + 64].copy_from_slice(bytemuck::bytes_of(&c));
                }
                // A BF16 value's bits are the exact f32's high half: an
                // even row's shifted down, the next row's kept in place.
                1 => store(&mut out[at..], _mm256_blend_epi16::<0xAA>(srli::<16>(a), c)),
                _ => store(
                    &mut out[at..],
                    _mm256_packus_epi32(f16_lanes(a).0, f16_lanes(c).0),
                ),
            }
        };
        let mut k = k0;
        while k < k1 {
            // The rest of block `block` in this call, from one load of it.
            let block = k / 32;
            let block_end = ((block + 1) * 32).min(k1);
            if OUT == 1 && b.bf16_normal(rb, block) {
                bf16_by_exponent(b, (rb, block), (k, block_end), k0, out);
                k = block_end;
                continue;
            }
            let factors = b.factors(rb, block, lanes);
            let at = |(lo, hi, step): (usize, usize, usize)| (rb + lo, rb + hi, step);
            let wa = b.words(at(a_rows), block);
            let wc = b.words(at(c_rows), block);
            while k < block_end {
                // Codes `[k, word_end)` of word `p` (8 codes a word).
                let p = k % 32 / 8;
                let word_end = ((k / 8 + 1) * 8).min(block_end);
                let words = (wa[p], wc[p]);
                if k % 8 == 0 && word_end - k == 8 {
                    for slot in 0..8 {
                        put(out, k + slot as usize, words, slot, factors);
                    }
                } else {
                    for k in k..word_end {
                        put(out, k, words, (k % 8) as i32, factors);
                    }
                }
                k = word_end;
            }
        }
    }
    true
}

/// A hint that `word`'s cache line is read soon: fetched into L2 (and
/// not L1, which the tile's stores pass through).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn prefetch(word: &u32) {
    let p: *const u32 = word;
    _mm_prefetch::<_MM_HINT_T1>(p.cast())
}

/// The 8 x 8 matrix of rows `v` transposed: lane `i` of result `j` is
/// lane `j` of `v[i]`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn transpose8(v: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(v[0], v[1]);
    let t1 = _mm256_unpackhi_ps(v[0], v[1]);
    let t2 = _mm256_unpacklo_ps(v[2], v[3]);
    let t3 = _mm256_unpackhi_ps(v[2], v[3]);
    let t4 = _mm256_unpacklo_ps(v[4], v[5]);
    let t5 = _mm256_unpackhi_ps(v[4], v[5]);
    let t6 = _mm256_unpacklo_ps(v[6], v[7]);
    let t7 = _mm256_unpackhi_ps(v[6], v[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}
