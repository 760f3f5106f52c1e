//! The kernels take the dtypes they round to as const parameters (0 F32,
//! 1 BF16, 2 F16), so that each combination is its own loop with no
//! branch on a dtype inside; these macros are the one table that picks
//! the instance for run-time dtypes.

/// `$f::<R>($args)` for `$dtype`'s code `R`, or `$none` for another dtype.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident($($arg:expr),* $(,)?), $none:expr) => {
        match $dtype {
            crate::Dtype::F32 => $f::<0>($($arg),*),
            crate::Dtype::BF16 => $f::<1>($($arg),*),
            crate::Dtype::F16 => $f::<2>($($arg),*),
            _ => $none,
        }
    };
}

/// `$f::<R, O>($args)` for `$dtype`'s code `R` and `$to`'s `O`, or `$none`
/// where either is another dtype.
macro_rules! by_dtypes {
    ($dtype:expr, $to:expr, $f:ident($($arg:expr),* $(,)?), $none:expr) => {{
        use crate::Dtype::{BF16, F16, F32};
        match ($dtype, $to) {
            (F32, F32) => $f::<0, 0>($($arg),*),
            (F32, BF16) => $f::<0, 1>($($arg),*),
            (F32, F16) => $f::<0, 2>($($arg),*),
            (BF16, F32) => $f::<1, 0>($($arg),*),
            (BF16, BF16) => $f::<1, 1>($($arg),*),
            (BF16, F16) => $f::<1, 2>($($arg),*),
            (F16, F32) => $f::<2, 0>($($arg),*),
            (F16, BF16) => $f::<2, 1>($($arg),*),
            (F16, F16) => $f::<2, 2>($($arg),*),
            _ => $none,
        }
    }};
}
