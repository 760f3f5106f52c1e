//! A refusal by one of the caller's [`Limits`](crate::limits::Limits).

/// Something an input would make us build or write is past a limit the
/// caller may set: names the limit, its value, and how to raise it (none
/// when the limit is the format's own).
///
/// ```
/// use safetensors_stream::limits::{Limit, Limits};
///
/// let e = Limits::default().refuse(Limit::PickleBytes, "data.pkl is 200000000 bytes");
/// assert_eq!(e.kind().name(), "pickle_bytes");
/// assert!(e.to_string().contains("--limit pickle-bytes=256MiB"), "{e}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: over the limit {limit}={value}{}", match .raise { Some(r) => format!(" (raise it with {r})"), None => " (the format's own limit, which cannot be raised)".to_string() })]
pub struct LimitExceeded {
    /// The limit's name (`pickle-budget`).
    pub limit: &'static str,
    /// The error's kind in reports: the limit's name in snake case
    /// (`pickle_budget`).
    pub kind: &'static str,
    /// Its value when it fired.
    pub value: u64,
    /// What went past it.
    pub what: String,
    /// The flag that raises it (`--limit pickle-budget=96MiB`); `None`
    /// for a hard cap.
    pub raise: Option<String>,
}
