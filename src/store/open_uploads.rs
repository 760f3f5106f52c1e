//! Multipart uploads left open: a `kill -9`, a lost node or a killed Dask
//! worker cannot abort its upload, whose parts stay (invisible, billed)
//! until something aborts them. `object_store` can abort an upload by id
//! but cannot list them, so on S3 (and S3-compatible servers) this module
//! sends ListMultipartUploads itself, signed with the store's own
//! credentials (SigV4, `object_store`'s [`AwsAuthorizer`]).
//!
//! Used twice: a shard about to be uploaded first aborts the uploads left
//! open for its own key (a shard key belongs to one task: an earlier
//! attempt's upload can only be a dead one), and `convert uploads
//! [--abort] s3://bucket/prefix` lists (and aborts) every open upload under
//! a prefix. GCS and Azure are not listed: on GCS the bucket lifecycle
//! rule is the remedy, and Azure discards uncommitted blocks itself.

use std::sync::Arc;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey as K, AwsAuthorizer};
use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjectPath;
use object_store::{ClientConfigKey, ClientOptions};

/// One multipart upload still open.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpenUpload {
    /// The object's key.
    pub key: String,
    /// The upload's id.
    pub upload_id: String,
    /// When it was started, as the store says it (ISO 8601).
    pub initiated: String,
}

/// An S3 bucket's open uploads: how to list and abort them.
#[derive(Debug)]
pub(crate) struct S3Uploads {
    builder: AmazonS3Builder,
    store: Arc<AmazonS3>,
    bucket: String,
}

/// Pages are at most 1,000 uploads; a prefix with more is read page by page,
/// up to this many pages.
const MAX_PAGES: usize = 1_000;

impl S3Uploads {
    /// For the store `builder` built, of the bucket `url` names.
    pub(crate) fn new(builder: AmazonS3Builder, store: Arc<AmazonS3>, url: &url::Url) -> S3Uploads {
        // (The builder reads its URL only when building.)
        let bucket = url.host_str().unwrap_or_default().to_string();
        S3Uploads {
            builder,
            store,
            bucket,
        }
    }

    /// The configuration the store was built from.
    pub(crate) fn builder(&self) -> &AmazonS3Builder {
        &self.builder
    }

    /// The bucket's URL, as `object_store` computes it (path style unless
    /// virtual-hosted requests are asked for).
    fn bucket_endpoint(&self) -> String {
        let get = |key: K| self.builder.get_config_value(&key);
        let bucket = &self.bucket;
        let region = get(K::Region).unwrap_or_else(|| "us-east-1".into());
        let virtual_hosted = get(K::VirtualHostedStyleRequest).is_some_and(|v| v == "true");
        match (
            get(K::S3Endpoint).or_else(|| get(K::Endpoint)),
            virtual_hosted,
        ) {
            (Some(endpoint), true) => endpoint,
            (Some(endpoint), false) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
            (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
            (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
        }
    }

    /// Every upload open under `prefix` (a key is its own prefix).
    pub(crate) async fn list(&self, prefix: &str) -> object_store::Result<Vec<OpenUpload>> {
        let client_key = |key: ClientConfigKey| self.builder.get_config_value(&K::Client(key));
        let mut options = ClientOptions::new();
        for key in [
            ClientConfigKey::AllowHttp,
            ClientConfigKey::AllowInvalidCertificates,
            ClientConfigKey::ProxyUrl,
            ClientConfigKey::Timeout,
            ClientConfigKey::ConnectTimeout,
            ClientConfigKey::ReadTimeout,
        ] {
            if let Some(value) = client_key(key) {
                options = options.with_config(key, value);
            }
        }
        let client = ReqwestConnector::default().connect(&options)?;
        let region = self
            .builder
            .get_config_value(&K::Region)
            .unwrap_or_else(|| "us-east-1".into());
        let unsigned = self
            .builder
            .get_config_value(&K::SkipSignature)
            .is_some_and(|v| v == "true");
        let mut found = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..MAX_PAGES {
            let mut query = format!("uploads=&prefix={}", encode(prefix));
            if let Some((key, id)) = &markers {
                query.push_str(&format!(
                    "&key-marker={}&upload-id-marker={}",
                    encode(key),
                    encode(id)
                ));
            }
            let url = format!("{}?{query}", self.bucket_endpoint());
            let mut request = http::Request::builder()
                .method(http::Method::GET)
                .uri(&url)
                .body(HttpRequestBody::empty())
                .map_err(|e| generic(e.to_string()))?;
            if !unsigned {
                let credential = self.store.credentials().get_credential().await?;
                AwsAuthorizer::new(&credential, "s3", &region).try_authorize(&mut request, None)?;
            }
            let response = client.execute(request).await.map_err(generic)?;
            let status = response.status();
            let body = response.into_body().bytes().await.map_err(generic)?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                return Err(generic(format!(
                    "listing open uploads: HTTP {status}: {}",
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                )));
            }
            let page = parse(&body)?;
            found.extend(page.uploads);
            match page.next {
                Some(next) => markers = Some(next),
                None => break,
            }
        }
        Ok(found)
    }

    /// Aborts every upload open for exactly `key`; how many there were.
    pub(crate) async fn abort_key(&self, key: &ObjectPath) -> object_store::Result<usize> {
        let open = self.list(key.as_ref()).await?;
        let mine: Vec<_> = open.iter().filter(|u| u.key == key.as_ref()).collect();
        for upload in &mine {
            self.abort(upload).await?;
        }
        Ok(mine.len())
    }

    /// Aborts one upload.
    pub(crate) async fn abort(&self, upload: &OpenUpload) -> object_store::Result<()> {
        let path = ObjectPath::from(upload.key.as_str());
        self.store.abort_multipart(&path, &upload.upload_id).await
    }
}

fn generic(e: impl ToString) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: e.to_string().into(),
    }
}

/// A query value percent-encoded as SigV4 wants it (a space as `%20`).
fn encode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// One page of ListMultipartUploads: its uploads, and the markers of the
/// next page when it is truncated.
struct Page {
    uploads: Vec<OpenUpload>,
    next: Option<(String, String)>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListResult {
    #[serde(default)]
    upload: Vec<UploadXml>,
    #[serde(default)]
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UploadXml {
    key: String,
    upload_id: String,
    #[serde(default)]
    initiated: String,
}

fn parse(body: &[u8]) -> object_store::Result<Page> {
    let text = std::str::from_utf8(body).map_err(generic)?;
    if !text.contains("<ListMultipartUploadsResult") {
        let start: String = text.chars().take(200).collect();
        return Err(generic(format!(
            "listing open uploads: not a listing: {start}"
        )));
    }
    let list: ListResult =
        quick_xml::de::from_str(text).map_err(|e| generic(format!("listing open uploads: {e}")))?;
    let uploads = list
        .upload
        .into_iter()
        .map(|u| OpenUpload {
            key: u.key,
            upload_id: u.upload_id,
            initiated: u.initiated,
        })
        .collect();
    let next = match (
        list.is_truncated,
        list.next_key_marker,
        list.next_upload_id_marker,
    ) {
        (true, Some(key), Some(id)) => Some((key, id)),
        _ => None,
    };
    Ok(Page { uploads, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page_is_parsed_with_its_markers() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>m/b.safetensors</NextKeyMarker><NextUploadIdMarker>id2</NextUploadIdMarker>
  <MaxUploads>2</MaxUploads><IsTruncated>true</IsTruncated>
  <Upload><Key>m/a&amp;b.safetensors</Key><UploadId>id1</UploadId>
    <Initiated>2026-12-04T21:00:00.000Z</Initiated></Upload>
  <Upload><Key>m/b.safetensors</Key><UploadId>id2</UploadId>
    <Initiated>2026-12-04T21:01:00.000Z</Initiated></Upload>
</ListMultipartUploadsResult>"#;
        let page = parse(xml).unwrap();
        assert_eq!(page.uploads.len(), 2);
        assert_eq!(page.uploads[0].key, "m/a&b.safetensors");
        assert_eq!(page.uploads[1].upload_id, "id2");
        assert_eq!(page.next, Some(("m/b.safetensors".into(), "id2".into())));
        let empty = br#"<ListMultipartUploadsResult><Bucket>b</Bucket>
            <IsTruncated>false</IsTruncated></ListMultipartUploadsResult>"#;
        let page = parse(empty).unwrap();
        assert!(page.uploads.is_empty() && page.next.is_none());
        // Another reply (a bucket listing: the bucket was not in the URL) is
        // an error, not "no uploads".
        assert!(parse(b"<ListAllMyBucketsResult></ListAllMyBucketsResult>").is_err());
    }

    #[test]
    fn query_values_are_encoded_for_sigv4() {
        assert_eq!(encode("a b+c/d~e"), "a%20b%2Bc%2Fd%7Ee");
    }

    #[test]
    fn the_bucket_endpoint_follows_object_store() {
        let uploads = |pairs: &[(K, &str)]| {
            let builder = pairs.iter().fold(
                AmazonS3Builder::new()
                    .with_url("s3://bkt/k")
                    .with_region("eu-west-1"),
                |b, (k, v)| b.with_config(*k, *v),
            );
            let store = Arc::new(builder.clone().with_skip_signature(true).build().unwrap());
            let url = url::Url::parse("s3://bkt/k").unwrap();
            S3Uploads::new(builder, store, &url).bucket_endpoint()
        };
        assert_eq!(uploads(&[]), "https://s3.eu-west-1.amazonaws.com/bkt");
        assert_eq!(
            uploads(&[(K::Endpoint, "http://127.0.0.1:5055/")]),
            "http://127.0.0.1:5055/bkt"
        );
        assert_eq!(
            uploads(&[(K::VirtualHostedStyleRequest, "true")]),
            "https://bkt.s3.eu-west-1.amazonaws.com"
        );
    }
}
