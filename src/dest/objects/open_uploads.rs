//! `convert uploads [--abort] s3://bucket/prefix`: every multipart upload
//! left open under a prefix, listed (and aborted) through the store
//! client's listing ([`crate::store::OpenUpload`]).

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;

use crate::error::store::StoreError;
use crate::store::{malformed, s3_unusable, store_output_error, OpenUpload, S3Uploads};
use crate::{Error, ErrorKind, Result};

/// Every multipart upload open under `url` (`s3://bucket/prefix`: a key,
/// a folder ending in `/`, or the bucket alone), each aborted too when
/// `abort`; the uploads found. What `convert uploads [--abort] URL` does.
pub async fn open_uploads(url: &str, abort: bool) -> Result<Vec<OpenUpload>> {
    let usage = |msg: String| Error::new(ErrorKind::Usage(msg)).with_output(url);
    if let Some(msg) = malformed(url).filter(|_| !url.ends_with('/')) {
        return Err(usage(msg));
    }
    let parsed = url::Url::parse(url).map_err(|e| usage(format!("not a valid URL: {e}")))?;
    if parsed.scheme() != "s3" {
        return Err(usage(
            "open uploads are listed on s3:// only (on GCS a lifecycle rule aborts them; \
             Azure discards uncommitted blocks itself)"
                .into(),
        ));
    }
    let key = parsed.path().trim_start_matches('/');
    let mut prefix = ObjectPath::from_url_path(key)
        .map_err(|e| usage(format!("not a valid object key: {e}")))?
        .to_string();
    if key.ends_with('/') && !prefix.is_empty() {
        prefix.push('/');
    }
    let on_store = |e: object_store::Error| store_output_error(e, url);
    let builder = AmazonS3Builder::from_env().with_url(url);
    if let Some(msg) = s3_unusable(&builder).await {
        let kind = ErrorKind::ObjectStore(StoreError::Unusable(msg));
        return Err(Error::new(kind).with_output(url));
    }
    let store = Arc::new(builder.clone().build().map_err(on_store)?);
    let s3 = S3Uploads::new(builder, store, &parsed);
    let open = s3.list(&prefix).await.map_err(on_store)?;
    if abort {
        for upload in &open {
            s3.abort(upload).await.map_err(on_store)?;
        }
    }
    Ok(open)
}
