//! Per-element transforms applied to each buffer as it streams.
//!
//! The sink reads whole elements into its buffer (its size is a multiple
//! of 8, every tensor's length a multiple of its element width) and applies
//! the tensor's transform in place before writing. The identity transform
//! costs nothing: the byte-identical path does no per-element work.

/// What to do to a tensor's bytes on their way through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transform {
    /// Bytes pass unchanged.
    #[default]
    Identity,
    /// Reverse the byte order of every `width`-byte word: big-endian to
    /// little-endian. C64 uses width 4: each half is an F32 of its own.
    SwapBytes {
        /// Word width in bytes: 2, 4 or 8.
        width: usize,
    },
}

impl Transform {
    /// What makes `dtype`'s bytes little-endian when they are stored in the
    /// other order: a swap of each element (of each F32 half of a C64), or
    /// nothing for one-byte and sub-byte dtypes and for little-endian data.
    ///
    /// ```
    /// use safetensors_stream::{source::Transform, Dtype};
    ///
    /// assert_eq!(Transform::to_little_endian(Dtype::C64, true), Transform::SwapBytes { width: 4 });
    /// assert_eq!(Transform::to_little_endian(Dtype::U8, true), Transform::Identity);
    /// assert_eq!(Transform::to_little_endian(Dtype::F32, false), Transform::Identity);
    /// ```
    pub fn to_little_endian(dtype: crate::Dtype, big_endian: bool) -> Transform {
        match dtype.byte_width() {
            Some(w) if big_endian && w > 1 => Transform::SwapBytes {
                width: if dtype == crate::Dtype::C64 {
                    4
                } else {
                    w as usize
                },
            },
            _ => Transform::Identity,
        }
    }

    /// Applies the transform to `buf`, whose length is a multiple of the word width.
    ///
    /// ```
    /// use safetensors_stream::source::Transform;
    ///
    /// let mut buf = [0x12, 0x34, 0x56, 0x78];
    /// Transform::SwapBytes { width: 2 }.apply(&mut buf);
    /// assert_eq!(buf, [0x34, 0x12, 0x78, 0x56]);
    /// ```
    pub fn apply(self, buf: &mut [u8]) {
        match self {
            Transform::Identity => {}
            Transform::SwapBytes { width: 2 } => swap_words::<2>(buf),
            Transform::SwapBytes { width: 4 } => swap_words::<4>(buf),
            Transform::SwapBytes { width: 8 } => swap_words::<8>(buf),
            Transform::SwapBytes { width } => {
                buf.chunks_exact_mut(width.max(1)).for_each(|w| w.reverse())
            }
        }
    }

    /// The largest unit the transform works on; buffers are cut at multiples of it.
    pub fn unit(self) -> usize {
        match self {
            Transform::Identity => 1,
            Transform::SwapBytes { width } => width.max(1),
        }
    }
}

/// Fixed-width reversal: the compiler turns this into vector shuffles.
fn swap_words<const W: usize>(buf: &mut [u8]) {
    for w in buf.chunks_exact_mut(W) {
        let a: &mut [u8; W] = w.try_into().expect("chunks_exact gives W bytes");
        a.reverse();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_match_from_be() {
        let words: Vec<u64> = (0..100u64)
            .map(|i| i.wrapping_mul(0x0123_4567_89ab_cdef))
            .collect();
        let mut buf: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        Transform::SwapBytes { width: 8 }.apply(&mut buf);
        let back: Vec<u64> = buf
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, words);
    }

    #[test]
    fn identity_is_untouched() {
        let mut buf = [1u8, 2, 3];
        Transform::Identity.apply(&mut buf);
        assert_eq!(buf, [1, 2, 3]);
    }
}
