//! Casts, bit for bit: against what numpy (`astype(np.float16)`,
//! `astype(np.float32)`, `astype(np.float64)`) and ml_dtypes (`bfloat16`)
//! produced (fixtures/cast/, written by fixtures/generate.py), and against an
//! independent exact scalar reference written here; then end to end through
//! `convert --cast` and `--cast-all`.
//!
//! `cargo test --release --test it casts -- --ignored --nocapture` also runs
//! every one of the 2^32 F32 patterns and prints the cast throughput.

use crate::support;

use support::{SplitMix, BIN};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use safetensors_stream::convert::{convert, ConvertOptions, Output as Out};
use safetensors_stream::plan::Cast;
use safetensors_stream::plan::PlanOptions;
use safetensors_stream::Dtype;

fn cast_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cast")
}

// ---------------------------------------------------------------------------
// The scalar reference: exact decoding, round to nearest even by integer
// arithmetic, and each library's NaN rule written out.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fmt {
    ebits: u32,
    mbits: u32,
}

const FMT_F64: Fmt = Fmt {
    ebits: 11,
    mbits: 52,
};
const FMT_F32: Fmt = Fmt {
    ebits: 8,
    mbits: 23,
};
const FMT_F16: Fmt = Fmt {
    ebits: 5,
    mbits: 10,
};
const FMT_BF16: Fmt = Fmt { ebits: 8, mbits: 7 };

impl Fmt {
    fn of(d: Dtype) -> Fmt {
        match d {
            Dtype::F64 => FMT_F64,
            Dtype::F32 => FMT_F32,
            Dtype::F16 => FMT_F16,
            Dtype::BF16 => FMT_BF16,
            _ => panic!("{d} is not a float kind"),
        }
    }
    fn width(self) -> usize {
        ((1 + self.ebits + self.mbits) / 8) as usize
    }
    fn bias(self) -> i32 {
        (1 << (self.ebits - 1)) - 1
    }
    fn exp_all_ones(self) -> u64 {
        (1 << self.ebits) - 1
    }
    fn sign_bit(self) -> u64 {
        1 << (self.ebits + self.mbits)
    }
    fn mant_mask(self) -> u64 {
        (1 << self.mbits) - 1
    }
    fn inf(self, sign: bool) -> u64 {
        (if sign { self.sign_bit() } else { 0 }) | self.exp_all_ones() << self.mbits
    }
}

enum Value {
    Nan {
        sign: bool,
        payload: u64,
    },
    Inf {
        sign: bool,
    },
    /// sign * mant * 2^exp2, exactly.
    Finite {
        sign: bool,
        mant: u64,
        exp2: i32,
    },
}

fn decode(f: Fmt, bits: u64) -> Value {
    let sign = bits & f.sign_bit() != 0;
    let e = (bits >> f.mbits) & f.exp_all_ones();
    let m = bits & f.mant_mask();
    if e == f.exp_all_ones() {
        return if m == 0 {
            Value::Inf { sign }
        } else {
            Value::Nan { sign, payload: m }
        };
    }
    let (mant, e) = if e == 0 {
        (m, 1)
    } else {
        (m | 1 << f.mbits, e as i32)
    };
    Value::Finite {
        sign,
        mant,
        exp2: e - f.bias() - f.mbits as i32,
    }
}

/// sign * mant * 2^exp2 rounded to nearest, ties to even, into `f`;
/// too large gives infinity, too small a signed zero.
fn encode(f: Fmt, sign: bool, mant: u64, exp2: i32) -> u64 {
    let s = if sign { f.sign_bit() } else { 0 };
    if mant == 0 {
        return s;
    }
    let lead = 63 - mant.leading_zeros() as i32 + exp2; // exponent of the leading bit
    let emin = 1 - f.bias();
    let q = lead.max(emin) - f.mbits as i32; // exponent of the last bit kept
    let n = if exp2 >= q {
        mant << (exp2 - q)
    } else {
        let sh = (q - exp2) as u32;
        if sh >= 64 {
            0
        } else {
            let (n, rem, half) = (mant >> sh, mant & ((1 << sh) - 1), 1u64 << (sh - 1));
            if rem > half || (rem == half && n & 1 == 1) {
                n + 1
            } else {
                n
            }
        }
    };
    if lead < emin {
        // Subnormal; n == 2^mbits is the smallest normal, which the same bits encode.
        return s | n;
    }
    let (n, lead) = if n == 1 << (f.mbits + 1) {
        (n >> 1, lead + 1)
    } else {
        (n, lead)
    };
    let biased = (lead + f.bias()) as u64;
    if biased >= f.exp_all_ones() {
        return f.inf(sign);
    }
    s | biased << f.mbits | (n & f.mant_mask())
}

/// What a NaN becomes.
#[derive(Debug, Clone, Copy)]
enum NanRule {
    /// numpy's software half conversions: the payload shifted, quiet or
    /// signalling as it was, never 0 (which would be infinity).
    Keep,
    /// The hardware conversions (C casts between float and double): the
    /// payload shifted, the quiet bit set.
    Quiet,
    /// Eigen, in ml_dtypes: the sign and the canonical quiet NaN.
    Canonical,
}

/// Who does each cast, and so what happens to a NaN. Every rule is checked
/// against the fixtures in `reference_agrees_with_the_fixtures`.
fn nan_rule(from: Dtype, to: Dtype) -> NanRule {
    use Dtype::*;
    match (from, to) {
        // numpy npy_floatbits_to_halfbits / npy_doublebits_to_halfbits /
        // npy_halfbits_to_floatbits / npy_halfbits_to_doublebits
        (F32 | F64, F16) | (F16, F32 | F64) => NanRule::Keep,
        // ml_dtypes: a shift
        (BF16, F32) => NanRule::Keep,
        // (double)(float)x and (float)x
        (F64, F32) | (F32, F64) | (BF16, F64) => NanRule::Quiet,
        // ml_dtypes: bfloat16 from anything, half from bfloat16
        (_, BF16) | (BF16, F16) => NanRule::Canonical,
        _ => panic!("no rule for {from} -> {to}"),
    }
}

fn reference(from: Dtype, to: Dtype, bits: u64) -> u64 {
    let (fi, fo) = (Fmt::of(from), Fmt::of(to));
    match decode(fi, bits) {
        Value::Inf { sign } => fo.inf(sign),
        Value::Finite { sign, mant, exp2 } => encode(fo, sign, mant, exp2),
        Value::Nan { sign, payload } => {
            let quiet = 1 << (fo.mbits - 1);
            let shifted = if fo.mbits >= fi.mbits {
                payload << (fo.mbits - fi.mbits)
            } else {
                payload >> (fi.mbits - fo.mbits)
            };
            let m = match nan_rule(from, to) {
                NanRule::Keep if shifted == 0 => 1,
                NanRule::Keep => shifted,
                NanRule::Quiet => shifted | quiet,
                NanRule::Canonical => quiet,
            };
            fo.inf(sign) | m
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn to_bytes(width: usize, xs: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xs.len() * width);
    for &x in xs {
        out.extend_from_slice(&x.to_le_bytes()[..width]);
    }
    out
}

fn from_bytes(width: usize, bytes: &[u8]) -> Vec<u64> {
    assert_eq!(bytes.len() % width, 0);
    bytes
        .chunks_exact(width)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..width].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

/// Our cast, through the public API the sink uses.
fn cast_bytes(from: Dtype, to: Dtype, input: &[u8]) -> Vec<u8> {
    let c = Cast::new(from, to).unwrap_or_else(|e| panic!("{e}"));
    let n = input.len() / c.in_width();
    let mut out = vec![0u8; n * c.out_width()];
    c.apply(input, &mut out);
    out
}

fn cast(from: Dtype, to: Dtype, input: &[u64]) -> Vec<u64> {
    let (wi, wo) = (Fmt::of(from).width(), Fmt::of(to).width());
    from_bytes(wo, &cast_bytes(from, to, &to_bytes(wi, input)))
}

fn reference_all(from: Dtype, to: Dtype, input: &[u64]) -> Vec<u64> {
    input.iter().map(|&x| reference(from, to, x)).collect()
}

/// Panics listing the first mismatches (input, got, want) in hex.
fn check(what: &str, from: Dtype, to: Dtype, input: &[u64], got: &[u64], want: &[u64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    assert_eq!(input.len(), want.len(), "{what}: lengths");
    let (wi, wo) = (Fmt::of(from).width() * 2, Fmt::of(to).width() * 2);
    let bad: Vec<String> = (0..input.len())
        .filter(|&i| got[i] != want[i])
        .map(|i| {
            format!(
                "  {from} {:#0wi$x} -> got {:#0wo$x}, want {:#0wo$x}",
                input[i],
                got[i],
                want[i],
                wi = wi + 2,
                wo = wo + 2
            )
        })
        .collect();
    if !bad.is_empty() {
        panic!(
            "{what}: {from} -> {to}: {} of {} differ; first ones:\n{}",
            bad.len(),
            input.len(),
            bad[..bad.len().min(20)].join("\n")
        );
    }
}

fn read_bits(name: &str, width: usize) -> Vec<u64> {
    let path = cast_dir().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    from_bytes(width, &bytes)
}

fn digests() -> serde_json::Value {
    let text = std::fs::read(cast_dir().join("digests.json")).expect("digests.json");
    serde_json::from_slice(&text).expect("digests.json is JSON")
}

fn crc_list(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("a list of CRCs")
        .iter()
        .map(|x| x.as_u64().expect("a CRC") as u32)
        .collect()
}

/// The five narrowing casts the issue names, with their fixture files.
const NARROWING: [(Dtype, Dtype, &str); 5] = [
    (Dtype::F32, Dtype::BF16, "f32_to_bf16.bin"),
    (Dtype::F32, Dtype::F16, "f32_to_f16.bin"),
    (Dtype::F64, Dtype::F32, "f64_to_f32.bin"),
    (Dtype::F64, Dtype::BF16, "f64_to_bf16.bin"),
    (Dtype::F64, Dtype::F16, "f64_to_f16.bin"),
];

fn sample_inputs(from: Dtype) -> Vec<u64> {
    match from {
        Dtype::F32 => read_bits("f32_in.bin", 4),
        Dtype::F64 => read_bits("f64_in.bin", 8),
        _ => unreachable!(),
    }
}

// ---------------------------------------------------------------------------
// Against the fixtures and the reference
// ---------------------------------------------------------------------------

#[test]
fn narrowing_matches_numpy_and_ml_dtypes_bit_for_bit() {
    let d = digests();
    for (from, to, file) in NARROWING {
        let input = sample_inputs(from);
        let count = d["samples"][from.as_str()]["count"].as_u64().unwrap();
        assert_eq!(input.len() as u64, count, "{file}: sample size");
        assert!(input.len() > 10_000, "{file}: a dense sample");
        let want = read_bits(file, Fmt::of(to).width());
        check(file, from, to, &input, &cast(from, to, &input), &want);
    }
}

#[test]
fn reference_agrees_with_the_fixtures() {
    for (from, to, file) in NARROWING {
        let input = sample_inputs(from);
        let want = read_bits(file, Fmt::of(to).width());
        check(
            &format!("reference vs {file}"),
            from,
            to,
            &input,
            &reference_all(from, to, &input),
            &want,
        );
    }
}

/// The fixtures hold what they are meant to: ties both ways, every exponent,
/// subnormals, NaNs of both signs, quiet and signalling.
#[test]
fn fixture_samples_cover_the_edge_cases() {
    for (from, fmt) in [(Dtype::F32, FMT_F32), (Dtype::F64, FMT_F64)] {
        let input = sample_inputs(from);
        let exp = |x: u64| (x >> fmt.mbits) & fmt.exp_all_ones();
        let man = |x: u64| x & fmt.mant_mask();
        let quiet = 1u64 << (fmt.mbits - 1);
        let has = |what: &str, p: &dyn Fn(u64) -> bool| {
            assert!(input.iter().any(|&x| p(x)), "{from} sample lacks {what}");
        };
        has("+0", &|x| x == 0);
        has("-0", &|x| x == fmt.sign_bit());
        has("+inf", &|x| x == fmt.inf(false));
        has("-inf", &|x| x == fmt.inf(true));
        has("max finite", &|x| x == fmt.inf(false) - 1);
        has("smallest subnormal", &|x| x == 1);
        has("largest subnormal", &|x| x == fmt.mant_mask());
        has("signalling NaN +", &|x| {
            exp(x) == fmt.exp_all_ones() && man(x) != 0 && man(x) & quiet == 0 && x < fmt.sign_bit()
        });
        has("signalling NaN -", &|x| {
            exp(x) == fmt.exp_all_ones() && man(x) != 0 && man(x) & quiet == 0 && x > fmt.sign_bit()
        });
        has("quiet NaN -", &|x| {
            exp(x) == fmt.exp_all_ones() && man(x) & quiet != 0 && x > fmt.sign_bit()
        });
        has("NaN with only the lowest payload bit", &|x| {
            exp(x) == fmt.exp_all_ones() && man(x) == 1
        });
        for e in 0..=fmt.exp_all_ones() {
            // F64: every exponent from below F32 subnormals to above its overflow
            if from == Dtype::F32 || (-152..=130).contains(&(e as i32 - fmt.bias())) {
                has(&format!("exponent {e}"), &|x| exp(x) == e);
            }
        }
        // For each narrower target: ties to even and to odd, normal and subnormal.
        for to in [Dtype::BF16, Dtype::F16, Dtype::F32] {
            let fo = Fmt::of(to);
            if fo.mbits >= fmt.mbits {
                continue;
            }
            let sh = fmt.mbits - fo.mbits;
            let tie = |x: u64| {
                exp(x) != 0
                    && exp(x) != fmt.exp_all_ones()
                    && man(x) & ((1 << sh) - 1) == 1 << (sh - 1)
            };
            has(&format!("{to} tie, even"), &|x| {
                tie(x) && man(x) >> sh & 1 == 0
            });
            has(&format!("{to} tie, odd"), &|x| {
                tie(x) && man(x) >> sh & 1 == 1
            });
            // A subnormal tie of the target: the exact value k/2 * its smallest subnormal.
            let min_sub = 1 - fo.bias() - fo.mbits as i32;
            let sub_tie = |x: u64| match decode(fmt, x) {
                Value::Finite { mant, exp2, .. } if mant != 0 => {
                    let lead = 63 - mant.leading_zeros() as i32 + exp2;
                    let tz = mant.trailing_zeros() as i32 + exp2;
                    lead < 1 - fo.bias() && tz == min_sub - 1
                }
                _ => false,
            };
            has(&format!("{to} subnormal tie"), &sub_tie);
        }
    }
}

#[test]
fn known_values() {
    use Dtype::*;
    let cases: &[(Dtype, Dtype, u64, u64, &str)] = &[
        (F32, F16, 0x477f_e000, 0x7bff, "65504, the largest half"),
        (
            F32,
            F16,
            0x477f_efff,
            0x7bff,
            "just under 65520 rounds down",
        ),
        (
            F32,
            F16,
            0x477f_f000,
            0x7c00,
            "65520, a tie, rounds to even: infinity",
        ),
        (
            F32,
            F16,
            0x3300_0000,
            0x0000,
            "2^-25: half the smallest subnormal, to even 0",
        ),
        (F32, F16, 0x3300_0001, 0x0001, "just over 2^-25"),
        (
            F32,
            F16,
            0x33c0_0000,
            0x0002,
            "3 * 2^-25: a tie to even 2 * 2^-24",
        ),
        (F32, F16, 0xb380_0000, 0x8001, "-2^-24"),
        (
            F32,
            F16,
            0x387f_e000,
            0x0400,
            "rounds up into the smallest normal",
        ),
        (F32, F16, 0x3f80_1000, 0x3c00, "1 + 2^-11: tie, even stays"),
        (
            F32,
            F16,
            0x3f80_3000,
            0x3c02,
            "1 + 3 * 2^-11: tie, odd goes up",
        ),
        (
            F32,
            F16,
            0x7f80_0001,
            0x7c01,
            "signalling NaN keeps a payload (numpy)",
        ),
        (
            F32,
            F16,
            0xffa0_0000,
            0xfd00,
            "signalling NaN payload, sign",
        ),
        (F32, BF16, 0x3f80_8000, 0x3f80, "tie, even stays"),
        (F32, BF16, 0x3f81_8000, 0x3f82, "tie, odd goes up"),
        (
            F32,
            BF16,
            0x7f7f_ffff,
            0x7f80,
            "max float overflows to infinity",
        ),
        (F32, BF16, 0x0000_8000, 0x0000, "subnormal tie to even 0"),
        (F32, BF16, 0x0001_8000, 0x0002, "subnormal tie to even"),
        (
            F32,
            BF16,
            0x7f80_0001,
            0x7fc0,
            "NaN squashed to quiet (ml_dtypes)",
        ),
        (F32, BF16, 0xff80_0001, 0xffc0, "NaN keeps its sign"),
        // 1 + 2^-8 + 2^-40: rounding straight to BF16 goes up; by way of
        // F32 it would first land on the tie 1 + 2^-8, then go to even 1.0.
        (
            F64,
            BF16,
            0x3ff0_1000_0010_0000,
            0x3f81,
            "one rounding, not two",
        ),
        (
            F64,
            BF16,
            0x3ff0_1000_0000_0000,
            0x3f80,
            "exact tie, even stays",
        ),
        (
            F64,
            BF16,
            0x3ff0_0fff_ffff_ffff,
            0x3f80,
            "just under the tie",
        ),
        (
            F64,
            BF16,
            0x3798_0000_0000_0000,
            0x0001,
            "1.5 * 2^-134: over the subnormal tie",
        ),
        (
            F64,
            BF16,
            0x3790_0000_0000_0000,
            0x0000,
            "2^-134: tie to even 0",
        ),
        (
            F64,
            BF16,
            0x47ef_f000_0000_0000,
            0x7f80,
            "the overflow tie goes to infinity",
        ),
        (
            F64,
            BF16,
            0xfff0_0000_0000_0001,
            0xffc0,
            "NaN squashed, sign kept",
        ),
        (
            F64,
            F16,
            0x3ff0_0200_0000_0001,
            0x3c01,
            "one rounding straight from F64",
        ),
        (
            F64,
            F16,
            0x7ff0_0000_0000_0001,
            0x7c01,
            "signalling NaN stays a NaN",
        ),
        (F64, F16, 0x7ff8_0000_0000_0001, 0x7e00, "quiet NaN"),
        (
            F64,
            F32,
            0x3ff0_0000_1000_0000,
            0x3f80_0000,
            "tie, even stays",
        ),
        (
            F64,
            F32,
            0x3ff0_0000_3000_0000,
            0x3f80_0002,
            "tie, odd goes up",
        ),
        (
            F64,
            F32,
            0x7ff0_0000_2000_0000,
            0x7fc0_0001,
            "NaN quieted, payload's top kept",
        ),
        (
            F64,
            F32,
            0x47ef_ffff_f000_0000,
            0x7f80_0000,
            "overflow tie to infinity",
        ),
        (
            F16,
            F32,
            0x7c01,
            0x7f80_2000,
            "signalling NaN stays signalling (numpy)",
        ),
        (
            F16,
            F32,
            0x0001,
            0x3380_0000,
            "the smallest subnormal, normalised",
        ),
        (
            F16,
            F64,
            0x7c01,
            0x7ff0_0400_0000_0000,
            "signalling NaN stays signalling",
        ),
        (BF16, F32, 0x7f81, 0x7f81_0000, "a shift: payload kept"),
        (
            BF16,
            F64,
            0x7f81,
            0x7ff8_2000_0000_0000,
            "by way of float: quieted",
        ),
        (
            BF16,
            F16,
            0x7fc1,
            0x7e00,
            "Eigen's half: canonical quiet NaN",
        ),
        (BF16, F16, 0xff81, 0xfe00, "with its sign"),
        (BF16, F16, 0x33c0, 0x0002, "subnormal tie to even"),
        (F16, BF16, 0x7c01, 0x7fc0, "NaN squashed"),
        (F32, F64, 0x7f80_0001, 0x7ff8_0000_2000_0000, "NaN quieted"),
    ];
    let mut bad = Vec::new();
    for &(from, to, input, want, why) in cases {
        let got = cast(from, to, &[input])[0];
        let refd = reference(from, to, input);
        if got != want || refd != want {
            bad.push(format!(
                "{from} {input:#x} -> {to}: got {got:#x}, reference {refd:#x}, want {want:#x} ({why})"
            ));
        }
    }
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
}

/// Every 16-bit pattern of F16 and BF16: to F32 and F64, and to each other;
/// element by element against the reference, block by block against numpy's
/// and ml_dtypes' digests.
#[test]
fn every_16_bit_pattern() {
    let d = digests();
    let widening = &d["widening"];
    let block = widening["block"].as_u64().unwrap() as usize;
    let all: Vec<u64> = (0..=u16::MAX as u64).collect();
    let pairs = [
        (Dtype::F16, Dtype::F32),
        (Dtype::BF16, Dtype::F32),
        (Dtype::F16, Dtype::F64),
        (Dtype::BF16, Dtype::F64),
        (Dtype::F16, Dtype::BF16),
        (Dtype::BF16, Dtype::F16),
    ];
    for (from, to) in pairs {
        let got = cast_bytes(from, to, &to_bytes(2, &all));
        let wo = Fmt::of(to).width();
        let got_bits = from_bytes(wo, &got);
        check(
            "every 16-bit pattern",
            from,
            to,
            &all,
            &got_bits,
            &reference_all(from, to, &all),
        );
        let want = crc_list(&widening[format!("{from}->{to}")]);
        assert_eq!(want.len(), all.len() / block);
        for (k, chunk) in got.chunks(block * wo).enumerate() {
            assert_eq!(
                crc32fast::hash(chunk),
                want[k],
                "{from} -> {to}: patterns {:#06x}..{:#06x} differ from the library's",
                k * block,
                (k + 1) * block
            );
        }
    }
}

#[test]
fn f32_to_f64_matches_numpy_on_the_sample() {
    let d = digests();
    let input = sample_inputs(Dtype::F32);
    let got = cast_bytes(Dtype::F32, Dtype::F64, &to_bytes(4, &input));
    check(
        "F32 sample",
        Dtype::F32,
        Dtype::F64,
        &input,
        &from_bytes(8, &got),
        &reference_all(Dtype::F32, Dtype::F64, &input),
    );
    let block = d["widening"]["block"].as_u64().unwrap() as usize;
    let want = crc_list(&d["samples"]["F32"]["F32->F64"]);
    let have: Vec<u32> = got.chunks(block * 8).map(crc32fast::hash).collect();
    assert_eq!(have, want, "F32 -> F64 differs from numpy's");
}

/// A dense random sample, weighted to where rounding happens, against the
/// reference: every float cast we accept.
#[test]
fn dense_random_sample_against_the_reference() {
    let mut rng = SplitMix(0x5eed_ca57);
    let mut f32s: Vec<u64> = Vec::with_capacity(1 << 19);
    let mut f64s: Vec<u64> = Vec::with_capacity(1 << 18);
    for i in 0..(1 << 19) {
        let r = rng.next();
        f32s.push(
            match i % 4 {
                0 => r & 0xffff_ffff,
                // exponents where F16 rounds (2^-26 .. 2^16), random mantissa and sign
                1 => (r >> 32 & 0x8000_0000) | (101 + (r >> 40) % 44) << 23 | (r & 0x7f_ffff),
                // ties of BF16 and F16 and their neighbours
                2 => ((r & 0xffff_0000) | 0x8000) + (r >> 32) % 3 - 1,
                _ => ((r & 0xffff_e000) | 0x1000) + (r >> 32) % 3 - 1,
            } & 0xffff_ffff,
        );
    }
    for i in 0..(1 << 18) {
        let r = rng.next();
        let s = r & 1 << 63;
        let m = rng.next() & FMT_F64.mant_mask();
        f64s.push(match i % 4 {
            0 => r,
            // F32 and BF16 range, subnormals included
            1 => s | (1023 - 152 + (r >> 20) % 282) << 52 | m,
            // F16 range
            2 => s | (1023 - 27 + (r >> 20) % 44) << 52 | m,
            // F32 ties and their neighbours
            _ => ((r & !0x1fff_ffff) | 0x1000_0000).wrapping_add((m % 3).wrapping_sub(1)),
        });
    }
    for to in [Dtype::BF16, Dtype::F16, Dtype::F64] {
        let got = cast(Dtype::F32, to, &f32s);
        check(
            "random",
            Dtype::F32,
            to,
            &f32s,
            &got,
            &reference_all(Dtype::F32, to, &f32s),
        );
    }
    for to in [Dtype::F32, Dtype::BF16, Dtype::F16] {
        let got = cast(Dtype::F64, to, &f64s);
        check(
            "random",
            Dtype::F64,
            to,
            &f64s,
            &got,
            &reference_all(Dtype::F64, to, &f64s),
        );
    }
}

/// Every F32 pattern to BF16 and F16, against the reference, and block by
/// block against the digests of numpy's and ml_dtypes' outputs (all 256
/// blocks for BF16; for F16 the 44 blocks where it rounds rather than
/// giving a constant zero or infinity, which numpy is slow to produce).
#[test]
#[ignore = "2^32 patterns: run with --release -- --ignored"]
fn every_f32_pattern() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let d = digests();
    let ex = &d["f32_exhaustive"];
    let block = ex["block"].as_u64().unwrap() as usize;
    assert_eq!(block, 1 << 24);
    let digest = |cast: &str, k: usize| ex[cast][k.to_string()].as_u64().map(|c| c as u32);
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut failures = Vec::new();
                    let mut input = vec![0u8; block * 4];
                    let mut out = vec![0u8; block * 2];
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= 256 {
                            return failures;
                        }
                        let base = (k as u32) << 24;
                        for (i, c) in input.chunks_exact_mut(4).enumerate() {
                            c.copy_from_slice(&(base + i as u32).to_le_bytes());
                        }
                        for (to, name) in [(Dtype::BF16, "F32->BF16"), (Dtype::F16, "F32->F16")] {
                            Cast::new(Dtype::F32, to).unwrap().apply(&input, &mut out);
                            if let Some(want) = digest(name, k) {
                                if crc32fast::hash(&out) != want {
                                    failures.push(format!("{name}: block {k:#04x}: CRC differs"));
                                }
                            }
                            for (i, o) in out.chunks_exact(2).enumerate() {
                                let x = (base + i as u32) as u64;
                                let got = u16::from_le_bytes([o[0], o[1]]) as u64;
                                let want = reference(Dtype::F32, to, x);
                                if got != want && failures.len() < 50 {
                                    failures.push(format!(
                                        "{name}: {x:#010x} -> got {got:#06x}, want {want:#06x}"
                                    ));
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    // All the digests the fixture holds were checked.
    assert_eq!(ex["F32->BF16"].as_object().unwrap().len(), 256);
    assert_eq!(ex["F32->F16"].as_object().unwrap().len(), 44);
}

/// Rough throughput of the casts over a 256 MiB buffer (input bytes per
/// second); run with `--release -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn cast_throughput() {
    use std::time::Instant;
    let len = 256 << 20;
    let mut rng = SplitMix(42);
    let mut input = vec![0u8; len];
    for c in input.chunks_exact_mut(8) {
        // ordinary values, as weights are: N(0, 1)-ish F32 pairs / F64s
        let x = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        c.copy_from_slice(&x.to_le_bytes());
    }
    let mut out = vec![0u8; len * 2];
    let mb = len as f64 / 1e6;
    out[..len].copy_from_slice(&input); // warm the pages
    let t = Instant::now();
    out[..len].copy_from_slice(&input);
    let copy = t.elapsed().as_secs_f64();
    println!("memcpy 256 MiB: {:.0} MB/s", mb / copy);
    for (from, to) in [
        (Dtype::F32, Dtype::BF16),
        (Dtype::F32, Dtype::F16),
        (Dtype::F64, Dtype::F32),
        (Dtype::F64, Dtype::BF16),
        (Dtype::F64, Dtype::F16),
        (Dtype::F16, Dtype::F32),
        (Dtype::BF16, Dtype::F32),
    ] {
        let c = Cast::new(from, to).unwrap();
        let n = len / c.in_width();
        let o = &mut out[..n * c.out_width()];
        c.apply(&input, o); // warm the pages
        let t = Instant::now();
        c.apply(&input, o);
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{from} -> {to}: {:.0} MB/s of input ({:.2} ns/element)",
            mb / secs,
            secs * 1e9 / n as f64
        );
    }
}

// ---------------------------------------------------------------------------
// Which casts are accepted
// ---------------------------------------------------------------------------

#[test]
fn integer_casts_only_widen() {
    use Dtype::*;
    let ints = [U8, I8, U16, I16, U32, I32, U64, I64];
    let range = |d: Dtype| -> (i128, i128) {
        let bits = d.bits() as u32;
        match d {
            U8 | U16 | U32 | U64 => (0, (1i128 << bits) - 1),
            _ => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        }
    };
    for from in ints {
        for to in ints {
            let (a, b) = (range(from), range(to));
            let lossless = from != to && b.0 <= a.0 && a.1 <= b.1;
            assert_eq!(
                Cast::new(from, to).is_ok(),
                lossless,
                "{from} -> {to}: {:?}",
                Cast::new(from, to)
            );
        }
    }
    for f in [F64, F32, F16, BF16] {
        for i in ints {
            assert!(Cast::new(f, i).is_err(), "{f} -> {i}");
            assert!(Cast::new(i, f).is_err(), "{i} -> {f}");
        }
        assert!(Cast::new(f, f).is_err(), "{f} -> {f}");
        for other in [BOOL, C64, F8_E4M3, F4] {
            assert!(Cast::new(f, other).is_err(), "{f} -> {other}");
        }
    }
}

// ---------------------------------------------------------------------------
// End to end: a safetensors file through `convert`
// ---------------------------------------------------------------------------

struct T {
    name: &'static str,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn ref_dtype(d: Dtype) -> safetensors::Dtype {
    serde_json::from_value(serde_json::Value::String(d.as_str().into())).unwrap()
}

fn our_dtype(d: safetensors::Dtype) -> Dtype {
    let s = serde_json::to_value(d).unwrap();
    s.as_str().unwrap().parse().unwrap()
}

/// Serialized by the reference writer.
fn safetensors_file(tensors: &[T]) -> Vec<u8> {
    let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            let v =
                safetensors::tensor::TensorView::new(ref_dtype(t.dtype), t.shape.clone(), &t.data)
                    .unwrap();
            (t.name, v)
        })
        .collect();
    safetensors::tensor::serialize(views, None).unwrap()
}

/// Each tensor as the reference reader sees it: dtype, shape, bytes, and the
/// length of its `data_offsets` range.
fn read_back(bytes: &[u8]) -> HashMap<String, (Dtype, Vec<usize>, Vec<u8>, usize)> {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("the reference reads it");
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            let info = meta.info(&name).unwrap();
            let span = info.data_offsets.1 - info.data_offsets.0;
            (
                name,
                (
                    our_dtype(v.dtype()),
                    v.shape().to_vec(),
                    v.data().to_vec(),
                    span,
                ),
            )
        })
        .collect()
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(BIN);
    for a in args {
        c.arg(a);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "convert failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn float_bits(dtype: Dtype, bits: &[u64]) -> Vec<u8> {
    to_bytes(Fmt::of(dtype).width(), bits)
}

/// The inputs of the end-to-end tests: every float kind, with the fixture's
/// edge cases in them, and integers.
fn mixed_tensors() -> Vec<T> {
    let f32s = sample_inputs(Dtype::F32);
    let f64s = sample_inputs(Dtype::F64);
    let f32s = &f32s[..33 * 64];
    let f64s = &f64s[..3 * 1001];
    let f16s: Vec<u64> = (0..=u16::MAX as u64).step_by(7).collect();
    let bf16s: Vec<u64> = (0..=u16::MAX as u64).rev().step_by(5).collect();
    let i16s: Vec<u8> = [i16::MIN, -2, -1, 0, 1, i16::MAX]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    vec![
        T {
            name: "w",
            dtype: Dtype::F32,
            shape: vec![33, 64],
            data: float_bits(Dtype::F32, f32s),
        },
        T {
            name: "d",
            dtype: Dtype::F64,
            shape: vec![3, 1001],
            data: float_bits(Dtype::F64, f64s),
        },
        T {
            name: "h",
            dtype: Dtype::F16,
            shape: vec![f16s.len()],
            data: float_bits(Dtype::F16, &f16s),
        },
        T {
            name: "b",
            dtype: Dtype::BF16,
            shape: vec![bf16s.len()],
            data: float_bits(Dtype::BF16, &bf16s),
        },
        T {
            name: "i",
            dtype: Dtype::I16,
            shape: vec![2, 3],
            data: i16s,
        },
        T {
            name: "u",
            dtype: Dtype::U8,
            shape: vec![3],
            data: vec![0, 7, 255],
        },
        T {
            name: "s",
            dtype: Dtype::F32,
            shape: vec![],
            data: 65520f32.to_le_bytes().to_vec(),
        },
        T {
            name: "e",
            dtype: Dtype::F64,
            shape: vec![0, 4],
            data: vec![],
        },
    ]
}

/// What each tensor must become under `casts`, by the reference.
fn expected(
    tensors: &[T],
    casts: &[(Dtype, Dtype)],
) -> HashMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    tensors
        .iter()
        .map(|t| {
            let (dtype, data) = match casts.iter().find(|(f, _)| *f == t.dtype) {
                None => (t.dtype, t.data.clone()),
                Some(&(from, to)) if from.is_float() => {
                    let bits = from_bytes(Fmt::of(from).width(), &t.data);
                    (to, float_bits(to, &reference_all(from, to, &bits)))
                }
                Some(&(from, to)) => (to, widen_int(from, to, &t.data)),
            };
            (t.name.to_string(), (dtype, t.shape.clone(), data))
        })
        .collect()
}

/// Integer widening by value, independently of the crate.
fn widen_int(from: Dtype, to: Dtype, data: &[u8]) -> Vec<u8> {
    let wi = from.byte_width().unwrap() as usize;
    let wo = to.byte_width().unwrap() as usize;
    let signed = matches!(from, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64);
    data.chunks_exact(wi)
        .flat_map(|c| {
            let mut b = [0u8; 8];
            b[..wi].copy_from_slice(c);
            let v = u64::from_le_bytes(b);
            let v = if signed {
                let shift = 64 - 8 * wi as u32;
                (((v << shift) as i64) >> shift) as i128
            } else {
                v as i128
            };
            v.to_le_bytes()[..wo].to_vec()
        })
        .collect()
}

fn assert_converted(out: &[u8], want: &HashMap<String, (Dtype, Vec<usize>, Vec<u8>)>) {
    let got = read_back(out);
    assert_eq!(got.len(), want.len());
    for (name, (dtype, shape, data)) in want {
        let (gd, gs, gdata, span) = &got[name];
        assert_eq!(gd, dtype, "{name}: dtype");
        assert_eq!(gs, shape, "{name}: shape");
        let n: usize = shape.iter().product();
        let width = dtype.byte_width().unwrap() as usize;
        assert_eq!(*span, n * width, "{name}: data_offsets length");
        if gdata != data {
            let i = gdata
                .iter()
                .zip(data)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!("{name}: {dtype} data differs first at byte {i}");
        }
    }
}

#[test]
fn convert_cast_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = mixed_tensors();
    let input = dir.path().join("in.safetensors");
    std::fs::write(&input, safetensors_file(&tensors)).unwrap();
    // Small buffers, so that elements meet buffer edges, and the default.
    for buffer in ["24", "1000", "4MiB"] {
        let out = dir.path().join(format!("out-{buffer}.safetensors"));
        let o = run(&[
            &input,
            &"-o",
            &out,
            &"--cast",
            &"F32=BF16",
            &"--cast",
            &"f64=f16",
            &"--cast",
            &"I16=I64",
            &"--buffer-size",
            &buffer,
            &"--quiet",
        ]);
        ok(&o);
        let casts = [
            (Dtype::F32, Dtype::BF16),
            (Dtype::F64, Dtype::F16),
            (Dtype::I16, Dtype::I64),
        ];
        let bytes = std::fs::read(&out).unwrap();
        assert_converted(&bytes, &expected(&tensors, &casts));
        let v = run(&[&"validate", &out]);
        ok(&v);
    }
}

#[test]
fn convert_cast_all_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = mixed_tensors();
    let input = dir.path().join("in.safetensors");
    std::fs::write(&input, safetensors_file(&tensors)).unwrap();
    for (to, extra, casts) in [
        (
            "F16",
            None,
            vec![
                (Dtype::F32, Dtype::F16),
                (Dtype::F64, Dtype::F16),
                (Dtype::BF16, Dtype::F16),
            ],
        ),
        (
            "BF16",
            Some("F64=F32"),
            vec![
                (Dtype::F32, Dtype::BF16),
                (Dtype::F64, Dtype::F32), // --cast wins over --cast-all
                (Dtype::F16, Dtype::BF16),
            ],
        ),
        (
            "F32",
            None,
            vec![
                (Dtype::F64, Dtype::F32),
                (Dtype::F16, Dtype::F32),
                (Dtype::BF16, Dtype::F32),
            ],
        ),
        (
            "F64",
            None,
            vec![
                (Dtype::F32, Dtype::F64),
                (Dtype::F16, Dtype::F64),
                (Dtype::BF16, Dtype::F64),
            ],
        ),
    ] {
        let out = dir.path().join(format!("all-{to}.safetensors"));
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&input, &"-o", &out, &"--cast-all", &to, &"--quiet"];
        if let Some(e) = &extra {
            args.push(&"--cast");
            args.push(e);
        }
        ok(&run(&args));
        let bytes = std::fs::read(&out).unwrap();
        // Integers are never touched by --cast-all.
        assert_converted(&bytes, &expected(&tensors, &casts));
    }
}

#[test]
fn library_cast_all_plans_the_new_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let tensors = mixed_tensors();
    let input = dir.path().join("in.safetensors");
    std::fs::write(&input, safetensors_file(&tensors)).unwrap();
    let out = dir.path().join("out.safetensors");
    let options = ConvertOptions::default()
        .plan(
            PlanOptions::default()
                .cast_all(Some(Dtype::BF16))
                .casts(vec![(Dtype::U8, Dtype::U16)]),
        )
        .sync(false);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt
        .block_on(convert(&[input], &Out::File(out.clone()), &options))
        .unwrap();
    let casts = [
        (Dtype::F32, Dtype::BF16),
        (Dtype::F64, Dtype::BF16),
        (Dtype::F16, Dtype::BF16),
        (Dtype::U8, Dtype::U16),
    ];
    let want = expected(&tensors, &casts);
    let bytes = std::fs::read(&out).unwrap();
    assert_converted(&bytes, &want);
    let data: usize = want.values().map(|(_, _, d)| d.len()).sum();
    assert_eq!(report.data_bytes, data as u64);
    assert_eq!(report.outputs[0].bytes, bytes.len() as u64);
}

#[test]
fn integer_widening_end_to_end() {
    use Dtype::*;
    let dir = tempfile::tempdir().unwrap();
    let pairs = [
        (I8, I16),
        (I16, I64),
        (I32, I64),
        (U8, U16),
        (U8, I32),
        (U16, U64),
        (U32, I64),
    ];
    for (from, to) in pairs {
        let w = from.byte_width().unwrap() as usize;
        // min, -1, 0, 1, max for signed; 0, 1, max - 1, max for unsigned
        let data: Vec<u8> = [
            vec![0x00; w],
            vec![0xff; w],
            {
                let mut v = vec![0u8; w];
                v[0] = 1;
                v
            },
            {
                let mut v = vec![0xffu8; w];
                v[w - 1] = 0x7f;
                v
            },
            {
                let mut v = vec![0u8; w];
                v[w - 1] = 0x80;
                v
            },
        ]
        .concat();
        let t = vec![T {
            name: "x",
            dtype: from,
            shape: vec![5],
            data,
        }];
        let input = dir.path().join(format!("{from}.safetensors"));
        std::fs::write(&input, safetensors_file(&t)).unwrap();
        let out = dir.path().join(format!("{from}-{to}.safetensors"));
        let spec = format!("{from}={to}");
        ok(&run(&[&input, &"-o", &out, &"--cast", &spec, &"--quiet"]));
        assert_converted(&std::fs::read(&out).unwrap(), &expected(&t, &[(from, to)]));
    }
}

#[test]
fn lossy_and_mixed_casts_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    std::fs::write(&input, safetensors_file(&mixed_tensors())).unwrap();
    let out = dir.path().join("out.safetensors");
    for args in [
        ["--cast", "I64=I32"],
        ["--cast", "I16=U16"],
        ["--cast", "U16=I16"],
        ["--cast", "I8=U64"],
        ["--cast", "U64=I64"],
        ["--cast", "F32=I32"],
        ["--cast", "I32=F32"],
        ["--cast", "F32=F32"],
        ["--cast", "F32=F8_E4M3"],
        ["--cast-all", "I32"],
        ["--cast-all", "F8_E5M2"],
    ] {
        let o = run(&[&input, &"-o", &out, &args[0], &args[1]]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("safetensors-convert: "), "{args:?}: {err}");
        assert!(
            err.contains(args[1].split('=').next().unwrap()),
            "{args:?}: names the dtype: {err}"
        );
        assert!(!out.exists(), "{args:?}: nothing written");
    }
    let o = run(&[&input, &"-o", &out, &"--cast", &"I64=I32"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("lose"),
        "says why: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The same pair given twice is refused too.
    let o = run(&[
        &input,
        &"-o",
        &out,
        &"--cast",
        &"F32=F16",
        &"--cast",
        &"F32=BF16",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// A big-endian raw dump is swapped, then cast, buffer by buffer.
#[test]
fn big_endian_raw_dump_then_cast() {
    let dir = tempfile::tempdir().unwrap();
    let f32s = sample_inputs(Dtype::F32);
    let f32s = &f32s[..4000];
    let be: Vec<u8> = f32s
        .iter()
        .flat_map(|&x| (x as u32).to_be_bytes())
        .collect();
    let dump = dir.path().join("dump.bin");
    std::fs::write(&dump, be).unwrap();
    for buffer in ["6", "4MiB"] {
        let out = dir.path().join(format!("out-{buffer}.safetensors"));
        ok(&run(&[
            &dump,
            &"--raw-dtype",
            &"F32",
            &"--raw-shape",
            &"40,100",
            &"--raw-byte-order",
            &"big",
            &"--name",
            &"w",
            &"--cast",
            &"F32=F16",
            &"--buffer-size",
            &buffer,
            &"-o",
            &out,
            &"--quiet",
        ]));
        let t = [T {
            name: "w",
            dtype: Dtype::F32,
            shape: vec![40, 100],
            data: float_bits(Dtype::F32, f32s),
        }];
        assert_converted(
            &std::fs::read(&out).unwrap(),
            &expected(&t, &[(Dtype::F32, Dtype::F16)]),
        );
    }
}
