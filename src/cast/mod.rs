//! Element casts applied while streaming: float narrowing and widening,
//! and lossless integer widening.
//!
//! Results are bit-identical to numpy's `astype(np.float16)` and
//! `astype(np.float32)` (its software half conversions keep NaN payloads
//! rather than quieting them; float/double conversions are the hardware's,
//! which quiet them) and to ml_dtypes' bfloat16 (round-to-nearest-even, NaN
//! squashed to a quiet NaN of the same sign; from F64 in one rounding, as
//! ml_dtypes 0.7 does, not by way of F32). Every rounding is to nearest,
//! ties to even; overflow gives infinity.
//!
//! The reference is [`scalar`], one element at a time; [`simd`] has vector
//! paths for the common casts, chosen at run time and bit-identical to it.

mod scalar;
// The crate's one exception to `deny(unsafe_code)` for computation: calls
// of `#[target_feature]` kernels after the CPU was found to have the
// feature (see the module's docs).
#[allow(unsafe_code)]
pub(crate) mod simd;

pub(crate) use scalar::{
    bf16_to_f16, bf16_to_f32, f16_to_f32, f16_to_f64, f32_to_bf16, f32_to_f16, f64_to_bf16,
    f64_to_f16,
};

use crate::Dtype;

/// A cast of every element from one dtype to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cast {
    from: Dtype,
    to: Dtype,
}

/// Why a cast is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot cast {from} to {to}: {reason}")]
pub struct CastError {
    /// The source dtype.
    pub from: Dtype,
    /// The target dtype.
    pub to: Dtype,
    /// Why not.
    pub reason: &'static str,
}

impl Cast {
    /// A cast from `from` to `to`, if it is one we do.
    ///
    /// ```
    /// use safetensors_stream::{plan::Cast, Dtype};
    ///
    /// assert!(Cast::new(Dtype::F32, Dtype::BF16).is_ok());
    /// assert!(Cast::new(Dtype::I64, Dtype::I32).is_err()); // lossy
    /// assert!(Cast::new(Dtype::I32, Dtype::I64).is_ok());
    /// ```
    pub fn new(from: Dtype, to: Dtype) -> Result<Cast, CastError> {
        let refuse = |reason| Err(CastError { from, to, reason });
        if from == to {
            return refuse("it is the same dtype");
        }
        if is_float_kind(from) && is_float_kind(to) {
            return Ok(Cast { from, to });
        }
        if from.is_float() || to.is_float() {
            return refuse(
                "only F64, F32, F16 and BF16 cast among themselves; integers and floats do not mix",
            );
        }
        if int_widens(from, to) {
            return Ok(Cast { from, to });
        }
        refuse("the integer cast could lose values")
    }

    /// The source dtype.
    pub fn from(self) -> Dtype {
        self.from
    }

    /// The target dtype.
    pub fn to(self) -> Dtype {
        self.to
    }

    /// Bytes per input element.
    pub fn in_width(self) -> usize {
        width(self.from)
    }

    /// Bytes per output element.
    pub fn out_width(self) -> usize {
        width(self.to)
    }

    /// Casts `input` (whole elements) into `output`, which must hold
    /// exactly as many elements. Returns how many finite elements became
    /// infinite (too large for the target: F32 65520.0 to F16), counted in
    /// the same pass; 0 for casts that cannot overflow.
    ///
    /// ```
    /// use safetensors_stream::{plan::Cast, Dtype};
    ///
    /// let cast = Cast::new(Dtype::F32, Dtype::F16).unwrap();
    /// let input: Vec<u8> = [1.0f32, 65520.0, -0.0].iter().flat_map(|f| f.to_le_bytes()).collect();
    /// let mut out = vec![0u8; 6];
    /// let overflowed = cast.apply(&input, &mut out);
    /// let halves: Vec<u16> = out.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    /// assert_eq!(halves, [0x3c00, 0x7c00, 0x8000]); // 65520 rounds up to infinity
    /// assert_eq!(overflowed, 1);
    /// ```
    pub fn apply(self, input: &[u8], output: &mut [u8]) -> u64 {
        let done = self.vector(input, output);
        let (i, o) = (done.elems * self.in_width(), done.elems * self.out_width());
        done.overflowed + self.reference(&input[i..], &mut output[o..])
    }

    /// The vector path for this thread, if it has one for this cast: it
    /// does whole vectors and says how many elements.
    fn vector(self, input: &[u8], output: &mut [u8]) -> simd::Done {
        use Dtype::*;
        let kernel = match (self.from, self.to) {
            (F32, BF16) => simd::f32_to_bf16,
            (BF16, F32) => simd::bf16_to_f32,
            (F32, F16) => simd::f32_to_f16,
            (F16, F32) => simd::f16_to_f32,
            (BF16, F16) => simd::bf16_to_f16,
            (F16, BF16) => simd::f16_to_bf16,
            (F64, F32) => simd::f64_to_f32,
            _ => return simd::Done::default(),
        };
        kernel(input, output)
    }

    /// The reference: [`Cast::apply`] one element at a time.
    fn reference(self, input: &[u8], output: &mut [u8]) -> u64 {
        use Dtype::*;
        debug_assert_eq!(
            input.len() / self.in_width(),
            output.len() / self.out_width()
        );
        // Narrowing casts: an infinite result from a finite input overflowed.
        match (self.from, self.to) {
            (F32, BF16) => narrow::<4, 2>(
                input,
                output,
                |b| f32_to_bf16(u32::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7f80,
                |i| u32::from_le_bytes(i) & 0x7fff_ffff == 0x7f80_0000,
            ),
            (F32, F16) => narrow::<4, 2>(
                input,
                output,
                |b| f32_to_f16(u32::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7c00,
                |i| u32::from_le_bytes(i) & 0x7fff_ffff == 0x7f80_0000,
            ),
            (F64, F32) => narrow::<8, 4>(
                input,
                output,
                |b| (f64::from_le_bytes(b) as f32).to_le_bytes(),
                |o| f32::from_le_bytes(o).is_infinite(),
                |i| f64::from_le_bytes(i).is_infinite(),
            ),
            (F64, BF16) => narrow::<8, 2>(
                input,
                output,
                |b| f64_to_bf16(u64::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7f80,
                |i| f64::from_le_bytes(i).is_infinite(),
            ),
            (F64, F16) => narrow::<8, 2>(
                input,
                output,
                |b| f64_to_f16(u64::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7c00,
                |i| f64::from_le_bytes(i).is_infinite(),
            ),
            (BF16, F16) => narrow::<2, 2>(
                input,
                output,
                |b| bf16_to_f16(u16::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7c00,
                |i| u16::from_le_bytes(i) & 0x7fff == 0x7f80,
            ),
            (from, to) => {
                widen(from, to, input, output);
                0
            }
        }
    }
}

/// The casts that cannot overflow: every value fits.
fn widen(from: Dtype, to: Dtype, input: &[u8], output: &mut [u8]) {
    {
        use Dtype::*;
        match (from, to) {
            (F16, F32) => map::<2, 4>(input, output, |b| {
                f16_to_f32(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (BF16, F32) => map::<2, 4>(input, output, |b| {
                bf16_to_f32(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (F16, F64) => map::<2, 8>(input, output, |b| {
                f16_to_f64(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (BF16, F64) => map::<2, 8>(input, output, |b| {
                (f32::from_bits(bf16_to_f32(u16::from_le_bytes(b))) as f64).to_le_bytes()
            }),
            (F32, F64) => map::<4, 8>(input, output, |b| {
                (f32::from_le_bytes(b) as f64).to_le_bytes()
            }),
            (F16, BF16) => map::<2, 2>(input, output, |b| {
                f32_to_bf16(f16_to_f32(u16::from_le_bytes(b))).to_le_bytes()
            }),
            (from, to) => widen_int(from, to, input, output),
        }
    }
}

fn is_float_kind(d: Dtype) -> bool {
    matches!(d, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16)
}

fn width(d: Dtype) -> usize {
    d.byte_width().unwrap_or(1) as usize
}

fn is_signed(d: Dtype) -> bool {
    matches!(d, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64)
}

/// Every value of `from` fits in `to`.
fn int_widens(from: Dtype, to: Dtype) -> bool {
    let ints = [
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::U32,
        Dtype::I32,
        Dtype::U64,
        Dtype::I64,
    ];
    if !ints.contains(&from) || !ints.contains(&to) {
        return false;
    }
    let (wf, wt) = (width(from), width(to));
    match (is_signed(from), is_signed(to)) {
        (false, false) | (true, true) => wt > wf,
        (false, true) => wt > wf,
        (true, false) => false,
    }
}

/// Element-wise over fixed widths: the shape the optimiser vectorises.
fn map<const I: usize, const O: usize>(
    input: &[u8],
    output: &mut [u8],
    f: impl Fn([u8; I]) -> [u8; O],
) {
    for (i, o) in input.chunks_exact(I).zip(output.chunks_exact_mut(O)) {
        o.copy_from_slice(&f(i.try_into().expect("chunks_exact gives I bytes")));
    }
}

/// Elements per block of [`narrow`]: a block's output stays in L1 for the count.
const NARROW_BLOCK: usize = 2048;

/// [`map`] for a cast that may overflow, returning how many finite inputs
/// became infinite. Block by block: the cast loop as [`map`] (vectorised),
/// then its output, still in L1, is scanned for infinities (a 16-bit
/// compare per element); only a block that holds one scans its input for
/// infinities, which cast to themselves and are not overflows. Far cheaper
/// than counting inside the cast loop, which keeps it from vectorising
/// (`cargo bench --bench kernels`, the cast rows).
fn narrow<const I: usize, const O: usize>(
    input: &[u8],
    output: &mut [u8],
    f: impl Fn([u8; I]) -> [u8; O] + Copy,
    out_infinite: impl Fn([u8; O]) -> bool,
    in_infinite: impl Fn([u8; I]) -> bool,
) -> u64 {
    let mut overflowed = 0u64;
    let blocks = input
        .chunks(NARROW_BLOCK * I)
        .zip(output.chunks_mut(NARROW_BLOCK * O));
    for (ib, ob) in blocks {
        map::<I, O>(ib, ob, f);
        // At most NARROW_BLOCK: a u16 keeps the count's lanes narrow.
        let infinite = ob
            .chunks_exact(O)
            .fold(0u16, |n, o| n + out_infinite(whole(o)) as u16);
        if infinite > 0 {
            let already = ib.chunks_exact(I).filter(|i| in_infinite(whole(i))).count();
            overflowed += u64::from(infinite) - already as u64;
        }
    }
    overflowed
}

/// A `chunks_exact` chunk as an array.
fn whole<const N: usize>(chunk: &[u8]) -> [u8; N] {
    chunk.try_into().expect("chunks_exact gives whole elements")
}

fn widen_int(from: Dtype, to: Dtype, input: &[u8], output: &mut [u8]) {
    let (wi, wo) = (width(from), width(to));
    let signed = is_signed(from);
    for (i, o) in input.chunks_exact(wi).zip(output.chunks_exact_mut(wo)) {
        let negative = signed && i[wi - 1] & 0x80 != 0;
        o[..wi].copy_from_slice(i);
        o[wi..].fill(if negative { 0xff } else { 0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_f16_is_exact_for_every_pattern() {
        for h in 0..=u16::MAX {
            let f = f32::from_bits(f16_to_f32(h));
            let exp = half::f16::from_bits(h).to_f32();
            if exp.is_nan() {
                assert!(f.is_nan(), "{h:#x}");
            } else {
                assert_eq!(f.to_bits(), exp.to_bits(), "{h:#x}");
                assert_eq!(f32_to_f16(f.to_bits()), h, "round trip {h:#x}");
            }
        }
    }

    #[test]
    fn bf16_round_trips() {
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if f32::from_bits(f).is_nan() {
                continue;
            }
            assert_eq!(f32_to_bf16(f), h, "{h:#x}");
        }
    }

    #[test]
    fn known_values() {
        // As numpy 2.4 and ml_dtypes 0.7 compute them.
        assert_eq!(f32_to_bf16(0x7f80_0001), 0x7fc0);
        assert_eq!(f32_to_bf16(0xffa0_0000), 0xffc0);
        assert_eq!(f32_to_bf16(0x3f80_8000), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16(0x3f81_8000), 0x3f82);
        assert_eq!(f32_to_bf16(0x7f7f_ffff), 0x7f80); // overflow
        assert_eq!(f32_to_f16(0x7f80_0001), 0x7c01);
        assert_eq!(f32_to_f16(0x7fc0_0001), 0x7e00);
        assert_eq!(f32_to_f16(0x7f81_2345), 0x7c09);
        assert_eq!(f32_to_f16(0x3f80_8000), 0x3c04);
        assert_eq!(f16_to_f32(0x7c01), 0x7f80_2000);
        assert_eq!(f64_to_f16(0x7ff0_0000_0000_0001), 0x7c01);
        assert_eq!(f64_to_f16(0x7ff8_0000_0000_0001), 0x7e00);
        assert_eq!(f64_to_f16(0x3ff0_0000_1000_0000), 0x3c00);
    }

    #[test]
    fn overflow_to_infinity_is_counted_not_infinities_or_nans() {
        let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let input = f32s(&[
            1.0,
            65520.0,
            -1e10,
            f32::INFINITY,
            f32::NAN,
            65504.0,
            f32::MAX,
        ]);
        let mut out = vec![0u8; 14];
        assert_eq!(
            Cast::new(Dtype::F32, Dtype::F16)
                .unwrap()
                .apply(&input, &mut out),
            3
        );
        // BF16 reaches 3.4e38: only the values that round past F32::MAX's neighbourhood.
        let mut out = vec![0u8; 14];
        assert_eq!(
            Cast::new(Dtype::F32, Dtype::BF16)
                .unwrap()
                .apply(&input, &mut out),
            1
        );
        let f64s: Vec<u8> = [1e300, -1e300, 1.0, f64::INFINITY, f64::NAN, 1e5]
            .iter()
            .flat_map(|x: &f64| x.to_le_bytes())
            .collect();
        for (to, want) in [(Dtype::F32, 2), (Dtype::BF16, 2), (Dtype::F16, 3)] {
            let c = Cast::new(Dtype::F64, to).unwrap();
            let mut out = vec![0u8; 6 * c.out_width()];
            assert_eq!(c.apply(&f64s, &mut out), want, "F64 -> {to}");
        }
        let bf16s: Vec<u8> = [0x4780u16, 0x7f80, 0x7fc0, 0x3f80]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let mut out = vec![0u8; 8];
        assert_eq!(
            Cast::new(Dtype::BF16, Dtype::F16)
                .unwrap()
                .apply(&bf16s, &mut out),
            1
        );
        let mut wide = vec![0u8; 16];
        assert_eq!(
            Cast::new(Dtype::BF16, Dtype::F32)
                .unwrap()
                .apply(&bf16s, &mut wide),
            0
        );
    }

    #[test]
    fn int_widening_sign_extends() {
        let c = Cast::new(Dtype::I16, Dtype::I64).unwrap();
        let mut out = [0u8; 16];
        c.apply(&[0xfe, 0xff, 0x02, 0x00], &mut out);
        assert_eq!(i64::from_le_bytes(out[..8].try_into().unwrap()), -2);
        assert_eq!(i64::from_le_bytes(out[8..].try_into().unwrap()), 2);
        assert!(Cast::new(Dtype::I8, Dtype::U16).is_err());
        assert!(Cast::new(Dtype::U8, Dtype::I16).is_ok());
        assert!(Cast::new(Dtype::U16, Dtype::I16).is_err());
        assert!(Cast::new(Dtype::F32, Dtype::I32).is_err());
    }
}
