//! Byte sizes: parsing `5GB` / `5GiB` as Hugging Face tools do, and printing them.

use std::fmt;

/// A size string that does not parse. Its message names the string and
/// what a size looks like, so that it stands alone wherever it is shown.
///
/// ```
/// use safetensors_stream::units::parse_size;
///
/// let e = parse_size("5XB").unwrap_err();
/// assert_eq!(e.0, "5XB");
/// assert!(e.to_string().contains("unknown unit \"XB\""), "{e}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {0:?}: {reason}; expected a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 5GB or 500MiB", reason = size_problem(.0))]
pub struct BadSize(pub String);

/// What is wrong with a size string that [`parse_size`] refused.
fn size_problem(s: &str) -> String {
    let t = s.trim();
    let (num, unit) = split_number(t);
    if t.is_empty() {
        "it is empty".into()
    } else if num.is_empty() {
        "it does not start with a number".into()
    } else if unit_multiplier(unit).is_none() {
        format!("unknown unit {:?}", unit.trim())
    } else if num.parse::<f64>().is_err() {
        format!("{num:?} is not a number")
    } else {
        "it does not fit in 64 bits".into()
    }
}

fn split_number(t: &str) -> (&str, &str) {
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    t.split_at(split)
}

fn unit_multiplier(unit: &str) -> Option<u64> {
    Some(match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return None,
    })
}

/// Parses a byte size. KB/MB/GB/TB are powers of ten, as huggingface_hub
/// reads them; KiB/MiB/GiB/TiB powers of two; a bare number is bytes.
/// Units are case-insensitive and may follow a space; the number may have
/// a fraction (`1.5GB`).
///
/// ```
/// use safetensors_stream::units::parse_size;
///
/// assert_eq!(parse_size("5GB"), Ok(5_000_000_000));
/// assert_eq!(parse_size("5GiB"), Ok(5 << 30));
/// assert_eq!(parse_size("1.5 kb"), Ok(1500));
/// assert_eq!(parse_size("4096"), Ok(4096));
/// assert!(parse_size("5 parsecs").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, BadSize> {
    let bad = || BadSize(s.to_string());
    let (num, unit) = split_number(s.trim());
    let mult = unit_multiplier(unit).ok_or_else(bad)?;
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(bad);
    }
    let f: f64 = num.parse().map_err(|_| bad())?;
    let bytes = (f * mult as f64).round();
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Displays a byte count for people: `1.50 GiB`, `512 B`.
///
/// ```
/// use safetensors_stream::units::HumanBytes;
/// assert_eq!(HumanBytes(1536).to_string(), "1.50 KiB");
/// assert_eq!(HumanBytes(12).to_string(), "12 B");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HumanBytes(pub u64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut v = self.0 as f64 / 1024.0;
        let mut i = 0;
        while v >= 1024.0 && i + 1 < UNITS.len() {
            v /= 1024.0;
            i += 1;
        }
        write!(f, "{v:.2} {}", UNITS[i])
    }
}

/// A byte count for people: `548 bytes`, and from 1 KiB on its binary
/// size too, `1536 bytes (1.50 KiB)`; never the same number twice.
///
/// ```
/// use safetensors_stream::units::ByteCount;
/// assert_eq!(ByteCount(548).to_string(), "548 bytes");
/// assert_eq!(ByteCount(1).to_string(), "1 byte");
/// assert_eq!(ByteCount(1536).to_string(), "1536 bytes (1.50 KiB)");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ByteCount(pub u64);

impl fmt::Display for ByteCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("1 byte"),
            n if n < 1024 => write!(f, "{n} bytes"),
            n => write!(f, "{n} bytes ({})", HumanBytes(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("").is_err());
        assert!(parse_size("-1GB").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000TB").is_err());
    }

    #[test]
    fn refusals_say_why() {
        let why = |s: &str| parse_size(s).unwrap_err().to_string();
        assert!(why("").contains("it is empty"));
        assert!(why("GB").contains("does not start with a number"));
        assert!(why("5 parsecs").contains("unknown unit \"parsecs\""));
        assert!(why("1.2.3GB").contains("\"1.2.3\" is not a number"));
        assert!(why("20000000TB").contains("64 bits"));
    }
}

/// A count and its noun, singular for one: `Counted(1, "tensor")` shows as
/// `1 tensor`, `Counted(3, "tensor")` as `3 tensors`.
///
/// ```
/// use safetensors_stream::units::Counted;
/// assert_eq!(Counted(1, "tensor").to_string(), "1 tensor");
/// assert_eq!(Counted(0, "shard").to_string(), "0 shards");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted<'a>(pub usize, pub &'a str);

impl std::fmt::Display for Counted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1 => write!(f, "1 {}", self.1),
            n => write!(f, "{n} {}s", self.1),
        }
    }
}
