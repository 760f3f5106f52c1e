//! The object-storage client, through the [`object_store`] crate: which
//! arguments are object URLs (`s3://bucket/key`, `gs://bucket/key`,
//! `az://container/key` in and out, `https://...` and `http://` in only),
//! the store and key a URL names, its credentials checked before any
//! request, the store's errors as ours, multipart part sizes, and the
//! listing of uploads left open. What is read and written through it
//! lives with the other sources and destinations:
//! [`crate::source::object`] reads objects, `dest::objects` writes them.
//!
//! Stores are built from the URL and the environment only (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*` and the clouds' own credential chains), never from
//! arguments, so that no credential is ever on a command line; messages
//! name the URL, never a credential.

mod budget;
mod credentials;
mod open_uploads;
mod parts;
mod patience;

pub use budget::{read_share, Budget, Lease, Reclaim, DEFAULT_BUDGET, MIN_BUDGET, READ_RESERVE};
pub use open_uploads::OpenUpload;
pub(crate) use open_uploads::S3Uploads;
pub use parts::{part_size, UploadConfig, IN_FLIGHT, MAX_PART, MAX_PARTS, MIN_PART, PART_SIZE};

use std::path::Path;
use std::sync::Arc;

use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use crate::error::store::StoreError;
use crate::{Error, ErrorKind, Result};
use object_store::aws::AmazonS3ConfigKey as K;

/// Connections kept open while idle, per server, unless
/// `AWS_POOL_MAX_IDLE_PER_HOST` says otherwise: each keeps its read buffer
/// (up to ~400 KB once a large response went through it), and the 32
/// header GETs of a sharded checkpoint's opening left 32 of them for the
/// whole run (the client's default keeps every one).
const IDLE_CONNECTIONS: usize = 8;

/// `builder` keeping at most [`IDLE_CONNECTIONS`] idle connections, unless
/// the environment set how many.
fn few_idle_connections(
    builder: object_store::aws::AmazonS3Builder,
) -> object_store::aws::AmazonS3Builder {
    let idle = K::Client(object_store::ClientConfigKey::PoolMaxIdlePerHost);
    if builder.get_config_value(&idle).is_some() {
        return builder;
    }
    builder.with_config(idle, IDLE_CONNECTIONS.to_string())
}

/// How long one request completing a multipart upload may take: S3 says
/// completing a large upload "could take several minutes" (it keeps the
/// connection alive meanwhile), and a server that copies the parts into
/// the object (s3s-fs) takes seconds per GB, more with several at once.
/// The client's 30 s default, meant for one part, would give up on it and
/// retry a completion that may have succeeded meanwhile: the retry is then
/// refused (the upload is gone) and a committed shard reported failed.
const COMPLETE_TIMEOUT: &str = "15m";

/// `builder` whose requests may take [`COMPLETE_TIMEOUT`], and be silent
/// that long (a `read_timeout` set for reads would cut a completion the
/// server answers only once it has copied the parts): the client
/// completing uploads, never the one sending parts (a stalled part is
/// still retried after the usual timeout).
fn slow_completions(
    builder: object_store::aws::AmazonS3Builder,
) -> object_store::aws::AmazonS3Builder {
    use object_store::ClientConfigKey::{ReadTimeout, Timeout};
    builder
        .with_config(K::Client(Timeout), COMPLETE_TIMEOUT)
        .with_config(K::Client(ReadTimeout), COMPLETE_TIMEOUT)
}

/// Whether `path` is shaped like a URL (`SCHEME://...`, or a scheme and
/// one slash, `s3:/bucket/key`) rather than a local path: such an argument
/// is never written or read as a local file. Whether the URL is one we can
/// reach is said when it is opened, as a usage error (an unknown scheme, a
/// missing slash), instead of a file named `s4:/bucket/x` appearing.
///
/// ```
/// use std::path::Path;
/// use safetensors_stream::store::is_url;
/// assert!(is_url(Path::new("s3://bucket/model.safetensors")));
/// assert!(is_url(Path::new("s4://bucket/x"))); // refused when opened, by name
/// assert!(is_url(Path::new("s3:/bucket/x")));  // likewise
/// assert!(!is_url(Path::new("model.safetensors")));
/// assert!(!is_url(Path::new("./s3:/x"))); // an explicit local path
/// ```
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(|text| scheme_of(text).is_some())
}

/// The scheme of a URL-shaped argument: RFC 3986's `ALPHA *( ALPHA / DIGIT
/// / "+" / "-" / "." )` followed by `:/`.
fn scheme_of(text: &str) -> Option<&str> {
    let (scheme, rest) = text.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let shaped = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && rest.starts_with('/');
    shaped.then_some(scheme)
}

/// The schemes we read; all but http(s) are written too.
const SCHEMES: [&str; 5] = ["s3", "gs", "az", "https", "http"];

/// A URL-shaped argument we cannot use, as a usage error (exit 2) saying
/// what would be: `None` when it is well formed with a known scheme.
pub(crate) fn malformed(url: &str) -> Option<String> {
    let scheme = scheme_of(url)?;
    let lower = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&lower.as_str()) {
        return Some(format!(
            "unsupported URL scheme {scheme:?}: object URLs are s3://, gs://, az://, \
             https:// or http:// (write ./{url} for a local path)"
        ));
    }
    if !url[scheme.len() + 1..].starts_with("//") {
        return Some(format!(
            "malformed URL: write {lower}://BUCKET/KEY (two slashes after the scheme)"
        ));
    }
    if url.ends_with('/') {
        return Some(
            "the URL names a prefix, not an object: object storage takes a file or an index \
             (*.index.json), not a folder (folders work for local paths only)"
                .to_string(),
        );
    }
    if has_dot_segment(url) {
        return Some(
            "the key has a . or .. segment, which URL parsing resolves away (another object \
             than the one named would be read or replaced): name the object by its key"
                .to_string(),
        );
    }
    None
}

/// Whether the key of `url` (after `SCHEME://BUCKET/`) has a `.` or `..`
/// segment, spelled `%2e` too. A URL's path loses them as it is parsed:
/// `s3://b/p/../m.safetensors` addresses `m.safetensors`, which the check
/// that an output is no input (comparing URLs as given) did not see.
fn has_dot_segment(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let key = after_scheme.split_once('/').map_or("", |(_, key)| key);
    let path = key.split(['?', '#']).next().unwrap_or_default();
    path.split('/').any(|segment| {
        let segment = segment.to_ascii_lowercase().replace("%2e", ".");
        segment == "." || segment == ".."
    })
}

/// Why an S3 store built from `builder` cannot work, said before any
/// request: an `http://` endpoint without `AWS_ALLOW_HTTP=true`, or no
/// credentials at all.
pub(crate) async fn s3_unusable(builder: &object_store::aws::AmazonS3Builder) -> Option<String> {
    let plain = [K::S3Endpoint, K::Endpoint]
        .iter()
        .find_map(|k| builder.get_config_value(k))
        .filter(|e| e.to_ascii_lowercase().starts_with("http://"));
    let allowed = builder
        .get_config_value(&K::Client(object_store::ClientConfigKey::AllowHttp))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if let Some(endpoint) = plain.filter(|_| !allowed) {
        return Some(format!(
            "the endpoint {endpoint} is plain http: set AWS_ALLOW_HTTP=true to use it"
        ));
    }
    credentials::missing(builder).await.map(str::to_string)
}

/// An object's URL, parsed and checked once, where it was named: a known
/// scheme, two slashes, a bucket and a key. Nothing is asked of the store
/// yet. It is no path: it never becomes a `PathBuf`, nor one of its names.
///
/// ```
/// use safetensors_stream::store::ObjectUrl;
/// let url = ObjectUrl::parse("s3://bucket/dir/model.safetensors")?;
/// assert_eq!(url.as_str(), "s3://bucket/dir/model.safetensors");
/// assert_eq!(url.name(), "model.safetensors");
/// assert!(ObjectUrl::parse("s3://bucket/").is_err()); // a prefix, not an object
/// # Ok::<(), String>(())
/// ```
///
/// ```compile_fail
/// use safetensors_stream::store::ObjectUrl;
/// let url = ObjectUrl::parse("s3://bucket/model.safetensors").unwrap();
/// let path: std::path::PathBuf = url.into(); // an object URL is no path
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ObjectUrl {
    /// The URL as given, for messages and for the names beside it.
    text: String,
    parsed: url::Url,
}

impl ObjectUrl {
    /// `text` as an object URL, or why it is not one (a message for a
    /// usage error: an unknown scheme, a missing slash, no key).
    pub fn parse(text: &str) -> std::result::Result<ObjectUrl, String> {
        if let Some(msg) = malformed(text) {
            return Err(msg);
        }
        let parsed = url::Url::parse(text).map_err(|e| format!("not a valid URL: {e}"))?;
        let key = parsed.path().trim_start_matches('/');
        ObjectPath::from_url_path(key).map_err(|e| format!("not a valid object key: {e}"))?;
        if key.is_empty() {
            return Err("the URL names no object (a key after the bucket)".into());
        }
        Ok(ObjectUrl {
            text: text.to_string(),
            parsed,
        })
    }

    /// The object URL an argument spells, when it is URL-shaped
    /// ([`is_url`]): parsed, or why it is not one we can use. `None` for a
    /// local path.
    pub(crate) fn from_arg(path: &Path) -> Option<std::result::Result<ObjectUrl, String>> {
        let text = path.to_str().filter(|_| is_url(path))?;
        Some(ObjectUrl::parse(text))
    }

    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `other` addresses the same object, however spelled: the
    /// scheme, the bucket (or host) and the key, percent-decoded, as the
    /// store is asked for them; a port, user, query or fragment is no part
    /// of an object's name (`s3://b/m.safetensors?x`, `S3://b/m%2Esafetensors`
    /// and `s3://b/m.safetensors` are one object).
    pub fn same_object(&self, other: &ObjectUrl) -> bool {
        self.addressed() == other.addressed()
    }

    /// What [`same_object`](Self::same_object) compares: the scheme, the
    /// bucket (or host) and the key, percent-decoded; a key to look an
    /// object up by among many.
    pub(crate) fn addressed(&self) -> (String, Option<String>, String) {
        let key = self.parsed.path().trim_start_matches('/');
        let key =
            ObjectPath::from_url_path(key).map_or_else(|_| key.to_string(), |p| p.to_string());
        let bucket = self.parsed.host_str().map(str::to_string);
        (self.parsed.scheme().to_string(), bucket, key)
    }

    /// The object's own name: the key's last segment.
    pub fn name(&self) -> &str {
        self.text.rsplit('/').next().unwrap_or_default()
    }

    /// The URL of the object `name` beside this one (a shard or index of
    /// the same set), as text.
    pub(crate) fn beside(&self, name: &str) -> String {
        let (dir, _) = self.text.rsplit_once('/').unwrap_or(("", ""));
        format!("{dir}/{name}")
    }

    /// The object `name` beside this one (a shard named by an index).
    pub(crate) fn sibling(&self, name: &str) -> ObjectUrl {
        let mut parsed = self.parsed.clone();
        let dir = parsed.path().rsplit_once('/').map_or("", |(dir, _)| dir);
        let path = format!("{dir}/{name}");
        parsed.set_path(&path);
        ObjectUrl {
            text: self.beside(name),
            parsed,
        }
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::fmt::Debug for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectUrl({:?})", self.text)
    }
}

/// An object: the store it is in, its key there, and its URL for messages.
#[derive(Clone)]
pub(crate) struct Object {
    /// The URL as given, for messages.
    pub(crate) url: String,
    /// The same URL, parsed: what a source reports it read.
    pub(crate) at: ObjectUrl,
    /// The store, for reads (and single PUTs).
    pub(crate) store: Arc<dyn ObjectStore>,
    /// The same store's multipart API; `None` for read-only (HTTP) stores.
    pub(crate) multipart: Option<Arc<dyn MultipartStore>>,
    /// The object's key in the store.
    pub(crate) path: ObjectPath,
    /// How to list and abort the uploads left open in its bucket (S3 only).
    pub(crate) uploads: Option<Arc<open_uploads::S3Uploads>>,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object").field("url", &self.url).finish()
    }
}

/// Which side of a conversion an object is on: what its errors name it as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Input,
    Output,
}

impl Side {
    /// `e`, naming `url` as an input or an output.
    pub(crate) fn name(self, e: Error, url: &str) -> Error {
        match self {
            Side::Input => e.with_input(url),
            Side::Output => e.with_output(url),
        }
    }

    fn store_error(self, e: object_store::Error, url: &str) -> Error {
        let kind = ErrorKind::ObjectStore(StoreError::from_store(e));
        self.name(Error::new(kind), url)
    }
}

impl Object {
    /// The object `url` names, in a store configured from the environment,
    /// once the environment is known to hold what the store needs: S3
    /// credentials, or the instance-metadata service to ask for them
    /// ([`credentials`]), and `AWS_ALLOW_HTTP=true` for an `http://`
    /// endpoint. Errors name `url` as on `side`.
    pub(crate) async fn open(url: &ObjectUrl, side: Side) -> Result<Object> {
        let loc = Object::parse_as(url, side)?;
        if let Some(uploads) = &loc.uploads {
            if let Some(msg) = s3_unusable(uploads.builder()).await {
                let kind = ErrorKind::ObjectStore(StoreError::Unusable(msg));
                return Err(side.name(Error::new(kind), url.as_str()));
            }
        }
        Ok(loc)
    }

    /// The object `url` names as an input (errors name it as one).
    #[cfg(test)]
    pub(crate) fn parse(url: &str) -> Result<Object> {
        let usage = |msg| Error::new(ErrorKind::Usage(msg)).with_input(url);
        Object::parse_as(&ObjectUrl::parse(url).map_err(usage)?, Side::Input)
    }

    /// The object `url` names, in a store configured from the environment
    /// (nothing asked of the store yet).
    pub(crate) fn parse_as(url: &ObjectUrl, side: Side) -> Result<Object> {
        use object_store::aws::AmazonS3Builder;
        use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
        use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
        use object_store::http::HttpBuilder;

        let at = url;
        let (parsed, url) = (&url.parsed, url.as_str());
        let bad = |msg: String| side.name(Error::new(ErrorKind::Usage(msg)), url);
        let key = parsed.path().trim_start_matches('/');
        let path = ObjectPath::from_url_path(key)
            .map_err(|e| bad(format!("not a valid object key: {e}")))?;
        let on_build = |e: object_store::Error| side.store_error(e, url);
        let patience = |prefix| patience::Patience::from_env(prefix).map_err(bad);
        let mut uploads = None;
        let (store, multipart): (Arc<dyn ObjectStore>, Option<Arc<dyn MultipartStore>>) =
            match parsed.scheme() {
                "s3" => {
                    let builder = patience(Some("AWS_"))?.apply(
                        AmazonS3Builder::from_env().with_url(url),
                        AmazonS3Builder::with_retry,
                        |b, key, value| b.with_config(K::Client(key), value),
                    );
                    let builder = few_idle_connections(builder);
                    let s = Arc::new(builder.clone().build().map_err(on_build)?);
                    let listing = open_uploads::S3Uploads::new(builder, s.clone(), parsed);
                    uploads = Some(Arc::new(listing));
                    (s.clone(), Some(s))
                }
                "gs" => {
                    let builder = patience(Some("GOOGLE_"))?.apply(
                        GoogleCloudStorageBuilder::from_env().with_url(url),
                        GoogleCloudStorageBuilder::with_retry,
                        |b, key, value| b.with_config(GoogleConfigKey::Client(key), value),
                    );
                    let s = Arc::new(builder.build().map_err(on_build)?);
                    (s.clone(), Some(s))
                }
                "az" => {
                    let builder = patience(Some("AZURE_"))?.apply(
                        MicrosoftAzureBuilder::from_env().with_url(url),
                        MicrosoftAzureBuilder::with_retry,
                        |b, key, value| b.with_config(AzureConfigKey::Client(key), value),
                    );
                    let s = Arc::new(builder.build().map_err(on_build)?);
                    (s.clone(), Some(s))
                }
                "http" | "https" => {
                    // The server's origin; the key is the path (a query is dropped).
                    let base = parsed.origin().ascii_serialization();
                    // Plain http only when the URL says so.
                    let client = object_store::ClientOptions::new()
                        .with_allow_http(parsed.scheme() == "http");
                    let builder = patience(None)?.apply(
                        HttpBuilder::new()
                            .with_url(base)
                            .with_client_options(client),
                        HttpBuilder::with_retry,
                        HttpBuilder::with_config,
                    );
                    let s = builder.build().map_err(on_build)?;
                    (Arc::new(s), None)
                }
                other => return Err(bad(format!("unknown URL scheme {other:?}"))),
            };
        Ok(Object {
            url: url.to_string(),
            at: at.clone(),
            store,
            multipart,
            path,
            uploads,
        })
    }

    /// The object `name` beside this one (a shard or index of the same set).
    pub(crate) fn sibling(&self, name: &str) -> Object {
        let (dir, _) = self.url.rsplit_once('/').unwrap_or(("", ""));
        let mut parts: Vec<_> = self.path.parts().collect();
        parts.pop();
        let path: ObjectPath = parts
            .into_iter()
            .chain(std::iter::once(
                ObjectPath::from(name).parts().next().unwrap_or_default(),
            ))
            .collect();
        Object {
            url: format!("{dir}/{name}"),
            at: self.at.sibling(name),
            path,
            ..self.clone()
        }
    }

    /// The multipart API for completing uploads: on S3 a client of the
    /// same store whose requests may take [`COMPLETE_TIMEOUT`]; `None`
    /// elsewhere (the parts' own client completes them).
    pub(crate) fn completer(&self) -> Result<Option<Arc<dyn MultipartStore>>> {
        let Some(uploads) = &self.uploads else {
            return Ok(None);
        };
        let built = slow_completions(uploads.builder().clone()).build();
        let store = built.map_err(|e| store_output_error(e, &self.url))?;
        Ok(Some(Arc::new(store)))
    }

    /// The multipart API, or a usage error for a read-only store.
    pub(crate) fn writable(&self) -> Result<Arc<dyn MultipartStore>> {
        self.multipart.clone().ok_or_else(|| {
            let msg = "an http(s) URL is read-only; write to s3://, gs:// or az://";
            Error::new(ErrorKind::Usage(msg.into())).with_output(&self.url)
        })
    }
}

/// An object store error as ours: the URL named (an input), the store's
/// own words (which name the request, never a secret), exit code 3.
pub(crate) fn store_error(e: object_store::Error, url: &str) -> Error {
    Side::Input.store_error(e, url)
}

/// [`store_error`] for an object being written: the URL named as the output.
pub(crate) fn store_output_error(e: object_store::Error, url: &str) -> Error {
    Side::Output.store_error(e, url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_dot_segments_are_refused_as_given() {
        for url in [
            "s3://b/p/../m.safetensors",
            "s3://b/./m.safetensors",
            "gs://b/p/%2E%2e/m.safetensors",
            "https://host/a/../m.safetensors",
        ] {
            let e = ObjectUrl::parse(url).unwrap_err();
            assert!(e.contains(". or .. segment"), "{url}: {e}");
        }
        // Dots inside a segment are a name's.
        for url in ["s3://b/p/..m.safetensors", "s3://b/p.../m.safetensors"] {
            assert_eq!(ObjectUrl::parse(url).unwrap().as_str(), url);
        }
    }

    #[test]
    fn one_object_spelled_many_ways_is_one_object() {
        let url = |t: &str| ObjectUrl::parse(t).unwrap();
        let m = url("s3://b/p/m.safetensors");
        for same in [
            "s3://b/p/m.safetensors?x=1",
            "s3://b/p/m.safetensors#f",
            "s3://b/p/m%2Esafetensors",
            "s3://b/p/%6D.safetensors",
            "S3://b/p/m.safetensors",
            "s3://user@b/p/m.safetensors",
            "s3://b:80/p/m.safetensors",
        ] {
            assert!(m.same_object(&url(same)), "{same}");
        }
        for other in [
            "s3://c/p/m.safetensors",
            "gs://b/p/m.safetensors",
            "s3://b/p/M.safetensors",
            "s3://b/m.safetensors",
            "s3://b/p/m.safetensors.gz",
        ] {
            assert!(!m.same_object(&url(other)), "{other}");
        }
    }

    #[test]
    fn writing_failures_name_the_output() {
        let e = || object_store::Error::NotFound {
            path: "k".into(),
            source: "gone".into(),
        };
        let url = "s3://b/k";
        let written = store_output_error(e(), url);
        assert_eq!((written.output(), written.input()), (Some(url), None));
        let read = store_error(e(), url);
        assert_eq!((read.input(), read.output()), (Some(url), None));
        assert_eq!(
            read.to_string(),
            "s3://b/k: object store: no such object (or bucket)"
        );
        // The store's own error is kept, under ours and the store kind.
        let kind = std::error::Error::source(&read).expect("the store kind");
        assert!(matches!(
            kind.downcast_ref::<StoreError>(),
            Some(StoreError::NotFound(_))
        ));
        let store = kind
            .source()
            .and_then(|s| s.downcast_ref::<object_store::Error>());
        assert!(matches!(store, Some(object_store::Error::NotFound { .. })));
        let web = Object::parse("https://host.example/x.safetensors").unwrap();
        let refused = web.writable().err().expect("read-only");
        assert_eq!(refused.output(), Some(web.url.as_str()));
    }

    #[test]
    fn urls_name_stores_and_keys() {
        let loc = Object::parse("s3://bucket/dir/model.safetensors").unwrap();
        assert_eq!(loc.path.as_ref(), "dir/model.safetensors");
        assert!(loc.multipart.is_some());
        let shard = loc.sibling("model-00001-of-00002.safetensors");
        assert_eq!(
            shard.url,
            "s3://bucket/dir/model-00001-of-00002.safetensors"
        );
        assert_eq!(shard.path.as_ref(), "dir/model-00001-of-00002.safetensors");
        let web = Object::parse("https://host.example/org/m/resolve/main/x.safetensors").unwrap();
        assert_eq!(web.path.as_ref(), "org/m/resolve/main/x.safetensors");
        assert!(web.writable().is_err());
        for bad in ["s3://bucket", "s3://bucket/", "ftp://host/x"] {
            assert!(Object::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn url_shaped_arguments_are_refused_by_name() {
        let usage = |url: &str| {
            let e = Object::parse(url).expect_err(url);
            assert_eq!(e.category(), crate::Category::Usage, "{url}: {e}");
            e.to_string()
        };
        assert!(usage("s4://bucket/x").contains("unsupported URL scheme \"s4\""));
        assert!(usage("s3:/bucket/x").contains("two slashes"));
        assert!(usage("s3://bucket/prefix/").contains("prefix, not an object"));
        // Schemes are case-insensitive (RFC 3986): S3:// is s3://.
        let upper = Object::parse("S3://bucket/x.safetensors").unwrap();
        assert_eq!(upper.path.as_ref(), "x.safetensors");
        for local in ["model.safetensors", "./s3:/x", "/tmp/a:b", "-", "c:x"] {
            assert!(!is_url(Path::new(local)), "{local}");
        }
    }
}
