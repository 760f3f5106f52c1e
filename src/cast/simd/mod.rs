//! Vector paths of the element kernels (casts, FP8 and GGUF
//! dequantization), chosen at run time, each bit-identical to its
//! reference in [`super::scalar`] or `crate::dequant`.
//!
//! # Mechanism
//!
//! `std::arch` intrinsics in `#[target_feature]` functions, picked once per
//! process by `is_x86_feature_detected!`. Where the arithmetic is the same
//! at every width it is written once, as a macro over a handful of lane
//! primitives (`lanes`: casts and FP8; `books`: NF4/FP4; `ggml`: GGUF
//! blocks), which `avx2` (8 lanes) and `avx512` (16 lanes, mask registers)
//! define and expand (`ggml2`, `ggml512` for the GGUF ones); `by_dtype`
//! picks a kernel's const-generic instance for run-time dtypes. The layouts
//! whose vectors run across rows (`quant2`: GPTQ, AWQ, MXFP4; `pack4`) have
//! an AVX2 kernel only. Not a crate, for three reasons:
//!
//! - **Bits.** Every kernel must give the reference's bits, NaN payloads
//!   included. The hardware conversions differ exactly there (F16C's
//!   `vcvtps2ph`/`vcvtph2ps` quiet a signalling NaN, numpy keeps it;
//!   AVX-512 BF16's `vcvtneps2bf16` keeps NaN payloads where ml_dtypes
//!   squashes them, and flushes subnormal inputs to zero), and so do
//!   `half`'s slice conversions (F16C where present, and a software
//!   fallback that sets the quiet bit). Written with intrinsics, each
//!   kernel uses the hardware instruction where it is exact and patches
//!   the lanes where it is not, in plain sight.
//! - **What is tested is what runs.** A multi-versioned scalar loop (what
//!   `multiversion` or `pulp` generate) is vectorised by LLVM only at
//!   `opt-level` 2 and up, so the test profile (1) would test scalar code
//!   under another name. Intrinsics are vector code at every level.
//! - **No FMA.** Nothing here fuses a multiply and an add: every
//!   reference rounds a product before it adds, and so does every kernel
//!   (`fma` is never enabled, and LLVM does not contract without it).
//!
//! # Safety
//!
//! This module is the crate's one exception to `deny(unsafe_code)` for
//! computation: the `unsafe` blocks below only call a `#[target_feature]`
//! function after [`Isa::detected`] found that feature on the CPU. The
//! kernels themselves are safe code: vectors are loaded from and stored to
//! slices through `bytemuck` (bounds-checked), never through pointers.
//!
//! # Choosing
//!
//! The best path the CPU has, unless `SAFETENSORS_STREAM_KERNELS` says
//! `scalar`, `avx2` or `avx512` (never above what the CPU has; other values
//! are ignored), read once. Tests and benchmarks force a path on one thread
//! with [`with_isa`]. Each vector kernel does whole vectors and says how
//! many elements it did; the caller does the rest with the reference.
//! The tests compare every path the test machine's CPU has with the
//! reference; a path above it is capped to it, so the AVX-512 kernels are
//! exercised only on a CPU with AVX-512 (the 2-core VMs of rounds 4 to 6
//! had AVX2 only; the AVX-512 bodies are the AVX2 ones, expanded over other
//! primitives). IQ4_XS and the `quant2`/`pack4` kernels take their AVX2
//! kernel on AVX-512 CPUs too.
//! aarch64 has NEON in its baseline, so LLVM vectorises the reference
//! loops there without a run-time choice; no hand-written path exists for
//! it yet.

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod lanes;
#[cfg(target_arch = "x86_64")]
#[macro_use]
mod by_dtype;
#[cfg(target_arch = "x86_64")]
#[macro_use]
mod books;
#[cfg(target_arch = "x86_64")]
#[macro_use]
mod ggml;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod ggml2;
#[cfg(target_arch = "x86_64")]
mod ggml512;
#[cfg(target_arch = "x86_64")]
mod pack4;
#[cfg(target_arch = "x86_64")]
mod quant2;

use std::cell::Cell;
use std::sync::OnceLock;

use crate::Dtype;

/// An instruction set the kernels have a path for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The reference code, compiled for the target's baseline.
    Scalar,
    /// x86-64 AVX2 with F16C.
    Avx2,
    /// x86-64 AVX-512 (F, BW, DQ, VL) with F16C.
    Avx512,
}

/// The variable that caps the path for a whole process.
pub(crate) const ENV: &str = "SAFETENSORS_STREAM_KERNELS";

impl Isa {
    /// Every path, lowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The best path this CPU has, found once.
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(detect)
    }

    /// Its name, as [`ENV`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The paths this CPU can run, lowest first.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn available() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|&i| i <= Isa::detected())
    }
}

fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c");
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl");
        match (avx2, avx512) {
            (true, true) => return Isa::Avx512,
            (true, false) => return Isa::Avx2,
            _ => {}
        }
    }
    Isa::Scalar
}

/// The path of this process: the detected one, capped by [`ENV`].
fn process_isa() -> Isa {
    static CAPPED: OnceLock<Isa> = OnceLock::new();
    *CAPPED.get_or_init(|| {
        let asked = std::env::var(ENV).ok();
        let cap = Isa::ALL
            .into_iter()
            .find(|i| asked.as_deref() == Some(i.name()));
        cap.map_or(Isa::detected(), |c| c.min(Isa::detected()))
    })
}

thread_local! {
    /// A path forced on this thread by [`with_isa`].
    static FORCED: Cell<Option<Isa>> = const { Cell::new(None) };
}

/// The path the kernels take on this thread.
pub(crate) fn isa() -> Isa {
    FORCED.with(Cell::get).unwrap_or_else(process_isa)
}

/// Runs `f` with the kernels of this thread on `isa` (capped at what the
/// CPU has): for tests and benchmarks that compare paths in one process.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn with_isa<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Isa>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORCED.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(FORCED.with(|c| c.replace(Some(isa.min(Isa::detected())))));
    f()
}

/// What a vector kernel did: its first `elems` elements, of which
/// `overflowed` finite ones became infinite.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Done {
    pub(crate) elems: usize,
    pub(crate) overflowed: u64,
}

/// Defines a dispatcher `name(args) -> ret` that runs the kernel of the
/// same name for the path of this thread, or returns `none` on the scalar
/// path (and off x86-64).
macro_rules! dispatch {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $none:expr;) => {
        dispatch!(avx512, avx2; $(#[$doc])* fn $name($($arg: $ty),*) -> $ret = $none;);
    };
    ($wide:ident, $narrow:ident;
     $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $none:expr;) => {
        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) -> $ret {
            match isa() {
                // SAFETY: `isa()` is never above `Isa::detected()`, which
                // found every feature the kernel enables.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => unsafe { $wide::$name($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { $narrow::$name($($arg),*) },
                _ => $none,
            }
        }
    };
}

dispatch! {
    /// F32 to BF16 (little-endian bytes), the reference's rounding and NaNs.
    fn f32_to_bf16(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// BF16 to F32.
    fn bf16_to_f32(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// F32 to F16, NaN payloads as numpy keeps them.
    fn f32_to_f16(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// F16 to F32, NaN payloads kept.
    fn f16_to_f32(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// BF16 to F16, NaN to a quiet NaN of its sign.
    fn bf16_to_f16(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// F16 to BF16 (by way of F32, exact).
    fn f16_to_bf16(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// F64 to F32, the hardware's conversion as the reference's `as f32`.
    fn f64_to_f32(input: &[u8], output: &mut [u8]) -> Done = Done::default();
}
dispatch! {
    /// One row of E4M3 codes in blocks of `block` columns, block `j` times
    /// `scales[j]`, each product rounded as `dtype` (F32, BF16 or F16)
    /// stores it: `dequant::fp8::rows` for one row. False if there is no
    /// vector path (then nothing was written).
    fn e4m3_row(codes: &[u8], scales: &[f32], block: usize, dtype: Dtype, out: &mut [f32]) -> bool
        = false;
}

dispatch! {
    /// [`e4m3_row`] stored as `to` (F32, BF16 or F16, little-endian) into
    /// `out`: each product rounded as `dtype` stores it, then cast once,
    /// from the register it was made in. False if there is no vector path
    /// (then nothing was written).
    fn e4m3_row_as(codes: &[u8], scales: &[f32], block: usize, dtype: Dtype, to: Dtype, out: &mut [u8]) -> bool
        = false;
}

/// GPTQ 4-bit, 8 output rows: row `j`'s word `w` at `words[w * stride +
/// j]` (input columns `8w..8w + 8`, low bits first), column `k`'s group
/// `groups[k]`, the rows' zero points and scales of group `g` at
/// `zeros[8g..8g + 8]`, `scales[8g..8g + 8]`; `runs[b]` the group of
/// columns `32b..32b + 32` when they are all in one, else [`MIXED`]
/// (whole blocks only; see [`int4_runs`]).
pub(crate) struct Int4Tile<'a> {
    pub words: &'a [u32],
    pub stride: usize,
    pub groups: &'a [u32],
    pub zeros: &'a [f32],
    pub scales: &'a [f32],
    pub runs: &'a [u32],
}

/// An [`Int4Tile`] block of 32 columns in more than one group.
pub(crate) const MIXED: u32 = u32::MAX;

/// [`Int4Tile::runs`] of columns in `groups`: each whole block of 32
/// columns' one group, or [`MIXED`].
pub(crate) fn int4_runs(groups: &[u32]) -> Vec<u32> {
    groups
        .chunks_exact(32)
        .map(|b| match b.iter().all(|&g| g == b[0]) {
            true => b[0],
            false => MIXED,
        })
        .collect()
}

/// One AutoAWQ 4-bit output row: input column `k`'s code the nibble at
/// `shift` of `words[k * stride]`, in group `k / group_size` of zero point
/// `zeros[g]` and scale `scales[g]`.
pub(crate) struct AwqRow<'a> {
    pub words: &'a [u32],
    pub stride: usize,
    pub shift: u32,
    pub group_size: usize,
    pub zeros: &'a [f32],
    pub scales: &'a [f32],
}

/// One compressed-tensors 4-bit row: column `k` nibble `k` of `words`
/// (low first), in group `group_of[k]` of zero point `zeros[g]` and scale
/// `scales[g]`.
pub(crate) struct Pack4Row<'a> {
    pub words: &'a [u32],
    pub group_of: &'a [u32],
    pub zeros: &'a [f32],
    pub scales: &'a [f32],
}

/// A K-quant block's sub-block scales and minimums (`d * sc`, `dmin * m`),
/// decoded by the reference.
pub(crate) type KScales = fn(&[u8]) -> ([f32; 8], [f32; 8]);

dispatch! { ggml512, ggml2;
    /// GGUF Q4_0 blocks (18 bytes, 32 elements each) into `out`. False if
    /// there is no vector path (then nothing was written); so below.
    fn q4_0(blocks: &[u8], out: &mut [f32]) -> bool = false;
}
dispatch! { ggml512, ggml2;
    /// GGUF Q8_0 blocks (34 bytes, 32 elements each).
    fn q8_0(blocks: &[u8], out: &mut [f32]) -> bool = false;
}
dispatch! { ggml512, ggml2;
    /// GGUF Q4_K blocks (144 bytes, 256 elements each), their scales
    /// decoded by `scales`.
    fn q4_k(blocks: &[u8], out: &mut [f32], scales: KScales) -> bool = false;
}
dispatch! { ggml512, ggml2;
    /// GGUF Q6_K blocks (210 bytes, 256 elements each).
    fn q6_k(blocks: &[u8], out: &mut [f32]) -> bool = false;
}
dispatch! { ggml512, ggml2;
    /// GGUF Q5_K blocks (176 bytes, 256 elements each), their scales
    /// decoded by `scales`.
    fn q5_k(blocks: &[u8], out: &mut [f32], scales: KScales) -> bool = false;
}
// IQ4_XS takes the AVX2 kernel on AVX-512 too: it is bound by the
// scalar scale decoding and the stores more than by the lanes.
dispatch! { ggml2, ggml2;
    /// GGUF IQ4_XS blocks (136 bytes, 256 elements each), the nibbles
    /// looked up in `table`.
    fn iq4_xs(blocks: &[u8], out: &mut [f32], table: &[i8; 16]) -> bool = false;
}

// The 4-bit schemes have an AVX2 kernel, taken on AVX-512 CPUs too.
dispatch! { quant2, quant2;
    /// bitsandbytes NF4/FP4: `book[q] * absmax` rounded as `dtype` stores
    /// it, `out`'s elements from `packed`'s first byte on (high nibble
    /// first). Returns the elements done (whole runs of 8; 0 on the
    /// reference path): the caller does the rest.
    fn four_bit(book: &[f32; 16], packed: &[u8], absmax: f32, dtype: Dtype, out: &mut [f32]) -> usize
        = 0;
}
dispatch! {
    /// bitsandbytes NF4/FP4, whole blocks of `blocksize` elements (a
    /// multiple of 16, else nothing is done) from `packed`'s first byte
    /// (high nibble first), block `j` times `absmax[j]`: each value rounded
    /// as `dtype` stores it, stored as `to` into `out`. Returns the
    /// elements done (0 on the reference path).
    #[allow(clippy::too_many_arguments)] // the kernel's, passed through
    fn four_bit_as(book: &[f32; 16], packed: &[u8], absmax: &[f32], blocksize: usize, dtype: Dtype, to: Dtype, out: &mut [u8]) -> usize
        = 0;
}
dispatch! { quant2, quant2;
    /// One GPTQ 4-bit output row: word `w` at `words[w * stride]`, column
    /// `k`'s group `groups[k]`, `(q - zeros[g]) * scales[g]` rounded as
    /// `dtype` stores it. Returns the columns done (whole words).
    fn int4_row(words: &[u32], stride: usize, groups: &[u32], zeros: &[f32], scales: &[f32], dtype: Dtype, out: &mut [f32]) -> usize
        = 0;
}
dispatch! { quant2, quant2;
    /// GPTQ 4-bit, the 8 output rows of `t` at once, each value
    /// `(q - zero) * scale` rounded as `dtype` stores it, then stored as
    /// `to` into `out`, the 8 rows of `groups.len()` elements. Returns the
    /// columns done in each row (whole words; 0 on the reference path).
    fn int4_rows8(t: &Int4Tile, dtype: Dtype, to: Dtype, out: &mut [u8]) -> usize
        = 0;
}
dispatch! { quant2, quant2;
    /// One AutoAWQ 4-bit output row `r`: `(q - zero) * scale` rounded as
    /// `dtype` stores it. Returns the columns done (whole runs of 8).
    fn awq_row(r: &AwqRow, dtype: Dtype, out: &mut [f32]) -> usize
        = 0;
}
dispatch! { pack4, pack4;
    /// One compressed-tensors 4-bit row `r`: `(q - zero) * scale` rounded
    /// as `dtype` stores it, written as `to` (F32 or `dtype`, else nothing
    /// is done) into `out`. Returns the columns done (whole words).
    fn pack4_row_as(r: &Pack4Row, dtype: Dtype, to: Dtype, out: &mut [u8]) -> usize
        = 0;
}
dispatch! { quant2, quant2;
    /// An MXFP4 row packed along it (low nibble first, a scale per 32 from
    /// the row's start): `book[scale][q]`. Returns the elements done.
    fn mxfp4_row(packed: &[u8], scales: &[u8], book: &[[f32; 16]; 256], out: &mut [f32]) -> usize
        = 0;
}
dispatch! { quant2, quant2;
    /// gpt-oss MXFP4 transposed: output rows `[k0, k0 + out.len() / rows)`
    /// of an expert's `rows` source rows of `width` blocks (scales block
    /// column after block column, `[width][rows]`), `book[scale][q]`.
    /// True when done, false (nothing written) unless `k0`, the output rows
    /// and `rows` are multiples of 8, and on the reference path.
    fn mxfp4_transposed(blocks: &[u8], scales: &[u8], width: usize, rows: usize, k0: usize, book: &[[f32; 16]; 256], out: &mut [f32]) -> bool
        = false;
}
dispatch! { quant2, quant2;
    /// [`mxfp4_transposed`] stored as `to` (F32, BF16 or F16) straight
    /// into `out`, no table lookup, each row's block loaded once, any `k0`
    /// and number of output rows. False (nothing written) unless `rows` is
    /// a multiple of 16, and on the reference path.
    fn mxfp4_transposed_as(blocks: &[u8], scales: &[u8], width: usize, rows: usize, k0: usize, to: Dtype, out: &mut [u8]) -> bool
        = false;
}

#[cfg(test)]
mod tests;
