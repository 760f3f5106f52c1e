//! Multipart part sizes: the limits S3 sets, the sizes chosen by default,
//! and the environment variables that change them
//! (`SAFETENSORS_STREAM_PART_SIZE`, `SAFETENSORS_STREAM_PARTS_IN_FLIGHT`).

use crate::{ErrorKind, Result};

/// The smallest part S3 accepts (but for the last).
pub const MIN_PART: u64 = 5 << 20;
/// The largest part S3 accepts.
pub const MAX_PART: u64 = 5 << 30;
/// The most parts one upload may have.
pub const MAX_PARTS: u64 = 10_000;
/// The part size unless an object needs larger ones: chosen by measurement
/// against boto3 (`benches/object_store.sh`, figures in `benches/results.md`;
/// boto3's own default too).
pub const PART_SIZE: u64 = 8 << 20;
/// Parts being sent at once, by default (likewise measured).
pub const IN_FLIGHT: usize = 8;

/// How objects are uploaded: the part size (the smallest used: a larger
/// object gets larger parts, see [`UploadConfig::part_size`]) and how many
/// parts are sent at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadConfig {
    /// At least [`MIN_PART`], at most [`MAX_PART`].
    pub part_size: u64,
    /// At least 1.
    pub in_flight: usize,
}

impl Default for UploadConfig {
    fn default() -> Self {
        UploadConfig {
            part_size: PART_SIZE,
            in_flight: IN_FLIGHT,
        }
    }
}

impl UploadConfig {
    /// The defaults, or `SAFETENSORS_STREAM_PART_SIZE` (bytes, or a size
    /// like `32MiB`) and `SAFETENSORS_STREAM_PARTS_IN_FLIGHT` (1 to 64); a
    /// value out of range is a usage error naming the variable.
    pub fn from_env() -> Result<UploadConfig> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`UploadConfig::from_env`] with the variables `get` gives.
    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<UploadConfig> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let bad = |name: &str, value: &str, want: &str| {
            let msg = format!("{name}={value:?}: want {want}");
            crate::Error::new(ErrorKind::Usage(msg))
        };
        let mut config = UploadConfig::default();
        const SIZE: &str = "SAFETENSORS_STREAM_PART_SIZE";
        if let Some(v) = var(SIZE) {
            let want = "a size from 5MiB to 5GiB";
            let size = crate::units::parse_size(&v).ok();
            let size = size.filter(|s| (MIN_PART..=MAX_PART).contains(s));
            config.part_size = size.ok_or_else(|| bad(SIZE, &v, want))?;
        }
        const PARTS: &str = "SAFETENSORS_STREAM_PARTS_IN_FLIGHT";
        if let Some(v) = var(PARTS) {
            let want = "a number of parts from 1 to 64";
            let n = v.trim().parse().ok().filter(|n| (1..=64).contains(n));
            config.in_flight = n.ok_or_else(|| bad(PARTS, &v, want))?;
        }
        Ok(config)
    }

    /// The part size for an object of `len` bytes: at least
    /// [`UploadConfig::part_size`], and large enough that [`MAX_PARTS`]
    /// parts hold it, rounded up to a MiB. All parts are this size but the
    /// last.
    ///
    /// ```
    /// use safetensors_stream::store::{UploadConfig, PART_SIZE};
    /// let config = UploadConfig::default();
    /// assert_eq!(config.part_size(1 << 30), PART_SIZE);
    /// assert_eq!(config.part_size(400_000_000_000), 39 << 20); // 38.1 MiB, rounded up
    /// ```
    pub fn part_size(&self, len: u64) -> u64 {
        part_size(len).max(self.part_size)
    }

    /// The most bytes an upload holds: one part filling, the rest in flight.
    pub fn memory(&self, len: u64) -> u64 {
        self.part_size(len)
            .saturating_mul(self.in_flight as u64 + 1)
    }
}

/// The smallest part size S3 allows for an object of `len` bytes: at
/// least [`MIN_PART`], and large enough that [`MAX_PARTS`] parts hold it,
/// rounded up to a MiB.
///
/// ```
/// use safetensors_stream::store::{part_size, MIN_PART};
/// assert_eq!(part_size(1 << 30), MIN_PART);
/// assert_eq!(part_size(400_000_000_000), 39 << 20); // 38.1 MiB, rounded up
/// ```
pub fn part_size(len: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let needed = len.div_ceil(MAX_PARTS).div_ceil(MIB).saturating_mul(MIB);
    needed.max(MIN_PART)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_sets_parts_and_bad_values_are_named() {
        let with = |pairs: &[(&str, &str)]| {
            let get = |name: &str| pairs.iter().find(|(k, _)| *k == name);
            UploadConfig::from_vars(|name| get(name).map(|(_, v)| v.to_string()))
        };
        let got = with(&[
            ("SAFETENSORS_STREAM_PART_SIZE", "32MiB"),
            ("SAFETENSORS_STREAM_PARTS_IN_FLIGHT", "3"),
        ])
        .unwrap();
        assert_eq!((got.part_size, got.in_flight), (32 << 20, 3));
        assert_eq!(got.memory(1 << 30), 128 << 20);
        for (name, value) in [
            ("SAFETENSORS_STREAM_PART_SIZE", "1MiB"),
            ("SAFETENSORS_STREAM_PART_SIZE", "lots"),
            ("SAFETENSORS_STREAM_PARTS_IN_FLIGHT", "0"),
        ] {
            let e = with(&[(name, value)]).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
        assert_eq!(with(&[]).unwrap(), UploadConfig::default());
    }

    #[test]
    fn part_sizes_keep_under_ten_thousand_parts() {
        for len in [
            0,
            1,
            MIN_PART * MAX_PARTS,
            MIN_PART * MAX_PARTS + 1,
            5 << 40,
        ] {
            let p = part_size(len);
            assert!(p >= MIN_PART && len.div_ceil(p) <= MAX_PARTS, "{len}");
        }
    }
}
