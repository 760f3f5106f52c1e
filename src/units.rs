//! Byte sizes: parsing `5GB` / `5GiB` as Hugging Face tools do, and printing them.

use std::fmt;

/// A size string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {0:?}: expected a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")]
pub struct BadSize(pub String);

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
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
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
}
