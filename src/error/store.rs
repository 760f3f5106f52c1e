//! What can go wrong with object storage: a few kinds a caller can act on,
//! the store's own error kept as the source.

/// Object storage refused or failed a request, cannot be reached as
/// configured, or holds an object that cannot be read or written as asked.
/// The message never holds a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum StoreError {
    /// No such object, or no such bucket.
    #[cfg(feature = "object-store")]
    #[error("no such object (or bucket)")]
    NotFound(#[source] object_store::Error),
    /// The store refused the request's credentials or their permissions.
    #[cfg(feature = "object-store")]
    #[error("{}", in_words(.0))]
    Denied(#[source] object_store::Error),
    /// Any other failed request: the network, the server, an unusable
    /// setting.
    #[cfg(feature = "object-store")]
    #[error("{}", in_words(.0))]
    Failed(#[source] object_store::Error),
    /// This environment cannot use the store as configured: no
    /// credentials, or a plain-http endpoint not allowed. Said before any
    /// request.
    #[error("{0}")]
    Unusable(String),
    /// The server answers a ranged GET with the whole object, and the
    /// object is larger than one whole GET may read.
    #[error(
        "the server ignores Range requests (it answered a ranged GET with the whole \
         object), and an object of {size} bytes is only read by ranges (the limit for \
         one whole GET is {limit}): download it first, or use a server that supports \
         ranges"
    )]
    RangesIgnored { size: u64, limit: u64 },
    /// A GET's body held other than the bytes of the range it answered: a
    /// server that sends more (read no further than the first byte too
    /// many) or fewer than its own `Content-Range` says.
    #[error(
        "the server answered a GET of bytes {start}..{end} with {sent} bytes{}",
        if *sent > *end - *start { " or more" } else { "" }
    )]
    BodyLength { start: u64, end: u64, sent: u64 },
    /// An upload ended with other than its planned bytes.
    #[error("{written} bytes written, {planned} planned")]
    UploadLength { written: u64, planned: u64 },
    /// An upload failed, its own error already told.
    #[error("upload failed")]
    UploadFailed,
}

impl StoreError {
    /// `e` in the kind a caller acts on.
    #[cfg(feature = "object-store")]
    pub(crate) fn from_store(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound(e),
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => StoreError::Denied(e),
            e => StoreError::Failed(e),
        }
    }
}

/// The store's words for `e` on one line, with the fix when a plain http
/// endpoint was refused, and the settings to change when a request timed
/// out.
#[cfg(feature = "object-store")]
fn in_words(e: &object_store::Error) -> String {
    let mut msg = one_line(e);
    if msg.contains("URL scheme is not allowed") {
        msg.push_str(
            " (a plain http endpoint: set AWS_ALLOW_HTTP=true, or GOOGLE_ALLOW_HTTP / \
             AZURE_ALLOW_HTTP for gs:// and az://)",
        );
    }
    if msg.contains("timed out") {
        msg.push_str(
            " (a slow or stalled server: SAFETENSORS_STREAM_TIMEOUT and \
             SAFETENSORS_STREAM_MAX_RETRIES set how long to wait, and how often to try again)",
        );
    }
    msg
}

/// An error and its causes on one line: the binary prints exactly one.
#[cfg(feature = "object-store")]
pub(crate) fn one_line(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        cause = c.source();
    }
    msg.split_whitespace().collect::<Vec<_>>().join(" ")
}
