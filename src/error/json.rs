//! JSON that does not read: a header's or a shard index's text.

use std::fmt;

/// JSON text (a safetensors header, a shard index) that serde_json could
/// not read: not JSON, or JSON of another shape. serde_json's error is the
/// [`source`](std::error::Error::source); [`JsonError::category`] tells a
/// syntax error from a missing field or an early end.
#[derive(Debug)]
pub struct JsonError {
    error: serde_json::Error,
    /// Whether the message keeps serde_json's "at line L column C" (when
    /// the error gives no byte offset instead).
    with_position: bool,
}

impl JsonError {
    /// serde_json's error, worded as serde_json words it.
    pub(crate) fn new(error: serde_json::Error) -> Self {
        JsonError {
            error,
            with_position: true,
        }
    }

    /// serde_json's error without its " at line L column C": the error
    /// gives the byte offset instead.
    pub(crate) fn without_position(error: serde_json::Error) -> Self {
        JsonError {
            error,
            with_position: false,
        }
    }

    /// What went wrong: a syntax error, data of another shape, an early
    /// end, or I/O.
    pub fn category(&self) -> serde_json::error::Category {
        self.error.classify()
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.error.to_string();
        match text.rfind(" at line ").filter(|_| !self.with_position) {
            Some(i) => f.write_str(&text[..i]),
            None => f.write_str(&text),
        }
    }
}

impl std::error::Error for JsonError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_is_kept_or_left_to_the_offset() {
        let bad = || serde_json::from_str::<serde_json::Value>("{\"a\":}").unwrap_err();
        let kept = JsonError::new(bad());
        assert_eq!(kept.to_string(), "expected value at line 1 column 6");
        let left = JsonError::without_position(bad());
        assert_eq!(left.to_string(), "expected value");
        assert_eq!(left.category(), serde_json::error::Category::Syntax);
        let under = std::error::Error::source(&left).expect("serde_json's error");
        assert!(under.is::<serde_json::Error>());
    }
}
