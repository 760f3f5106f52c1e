//! What can go wrong with object storage: a few kinds a caller can act on,
//! the store's own error kept as the source.

use std::fmt;

/// Object storage refused or failed a request, cannot be reached as
/// configured, or holds an object that cannot be read or written as asked.
/// The message never holds a credential.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// No such object, or no such bucket.
    #[cfg(feature = "object-store")]
    NotFound(object_store::Error),
    /// The store refused the request's credentials or their permissions.
    #[cfg(feature = "object-store")]
    Denied(object_store::Error),
    /// Any other failed request: the network, the server, an unusable
    /// setting.
    #[cfg(feature = "object-store")]
    Failed(object_store::Error),
    /// This environment cannot use the store as configured: no
    /// credentials, or a plain-http endpoint not allowed. Said before any
    /// request.
    Unusable(String),
    /// The server answers a ranged GET with the whole object, and the
    /// object is larger than one whole GET may read.
    RangesIgnored {
        /// The object's bytes.
        size: u64,
        /// The most bytes read whole.
        limit: u64,
    },
    /// An upload ended with other than its planned bytes.
    UploadLength {
        /// Bytes sent.
        written: u64,
        /// Bytes planned.
        planned: u64,
    },
    /// An upload failed, its own error already told.
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

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "object-store")]
            StoreError::NotFound(_) => f.write_str("no such object (or bucket)"),
            #[cfg(feature = "object-store")]
            StoreError::Denied(e) | StoreError::Failed(e) => f.write_str(&in_words(e)),
            StoreError::Unusable(why) => f.write_str(why),
            StoreError::RangesIgnored { size, limit } => write!(
                f,
                "the server ignores Range requests (it answered a ranged GET with the whole \
                 object), and an object of {size} bytes is only read by ranges (the limit for \
                 one whole GET is {limit}): download it first, or use a server that supports \
                 ranges"
            ),
            StoreError::UploadLength { written, planned } => {
                write!(f, "{written} bytes written, {planned} planned")
            }
            StoreError::UploadFailed => f.write_str("upload failed"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(feature = "object-store")]
            StoreError::NotFound(e) | StoreError::Denied(e) | StoreError::Failed(e) => Some(e),
            _ => None,
        }
    }
}

/// The store's words for `e` on one line, with the fix when a plain http
/// endpoint was refused.
#[cfg(feature = "object-store")]
fn in_words(e: &object_store::Error) -> String {
    let mut msg = one_line(e);
    if msg.contains("URL scheme is not allowed") {
        msg.push_str(
            " (a plain http endpoint: set AWS_ALLOW_HTTP=true, or GOOGLE_ALLOW_HTTP / \
             AZURE_ALLOW_HTTP for gs:// and az://)",
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
