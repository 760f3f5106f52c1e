//! S3 credentials that cannot be had, said at once. With no key, no web
//! identity and no container credentials in the environment,
//! `object_store` asks the instance-metadata endpoint, retrying for seconds,
//! and the run then fails with words about a PUT to 169.254.169.254. Here
//! that endpoint is asked once (the IMDSv2 token request, one second at
//! most, once per process) and, when it gives no token, the run stops with
//! one line naming the variables to set.

use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as K};
use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::{ClientConfigKey, ClientOptions};
use tokio::sync::OnceCell;

/// Where `object_store` asks for instance credentials unless told otherwise.
const METADATA_ENDPOINT: &str = "http://169.254.169.254";

/// What is said when there is nothing to sign with.
pub(crate) const NO_CREDENTIALS: &str =
    "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for \
     temporary keys), or AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or run where container \
     or instance credentials are served (AWS_PROFILE and ~/.aws files are not read; for a \
     public bucket set AWS_SKIP_SIGNATURE=true)";

/// Whether `builder` has something to sign with without asking the
/// instance-metadata endpoint.
fn configured(builder: &AmazonS3Builder) -> bool {
    let has = |key: K| {
        builder
            .get_config_value(&key)
            .is_some_and(|v| !v.is_empty())
    };
    let unsigned = builder
        .get_config_value(&K::SkipSignature)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    unsigned
        || has(K::AccessKeyId)
        || (has(K::WebIdentityTokenFile) && has(K::RoleArn))
        || has(K::ContainerCredentialsRelativeUri)
        || has(K::ContainerCredentialsFullUri)
}

/// [`NO_CREDENTIALS`] when `builder` has no credentials and no instance
/// metadata service answers; `None` when it has some, or may.
pub(crate) async fn missing(builder: &AmazonS3Builder) -> Option<&'static str> {
    if configured(builder) {
        return None;
    }
    let disabled =
        std::env::var("AWS_EC2_METADATA_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if disabled {
        return Some(NO_CREDENTIALS);
    }
    let endpoint = builder
        .get_config_value(&K::MetadataEndpoint)
        .unwrap_or_else(|| METADATA_ENDPOINT.to_string());
    static SERVED: OnceCell<bool> = OnceCell::const_new();
    let served = *SERVED
        .get_or_init(|| instance_metadata_served(&endpoint))
        .await;
    (!served).then_some(NO_CREDENTIALS)
}

/// Whether the metadata endpoint hands out an IMDSv2 token within a second.
async fn instance_metadata_served(endpoint: &str) -> bool {
    let options = ClientOptions::new()
        .with_allow_http(true)
        .with_config(ClientConfigKey::Timeout, "1s")
        .with_config(ClientConfigKey::ConnectTimeout, "1s");
    let Ok(client) = ReqwestConnector::default().connect(&options) else {
        return false;
    };
    let url = format!("{}/latest/api/token", endpoint.trim_end_matches('/'));
    let Ok(request) = http::Request::builder()
        .method(http::Method::PUT)
        .uri(url)
        .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
        .body(HttpRequestBody::empty())
    else {
        return false;
    };
    let asked = tokio::time::timeout(Duration::from_secs(2), client.execute(request));
    matches!(asked.await, Ok(Ok(response)) if response.status().is_success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(pairs: &[(K, &str)]) -> AmazonS3Builder {
        pairs
            .iter()
            .fold(AmazonS3Builder::new().with_url("s3://b/k"), |b, (k, v)| {
                b.with_config(*k, *v)
            })
    }

    #[test]
    fn keys_roles_and_unsigned_count_as_credentials() {
        assert!(configured(&builder(&[
            (K::AccessKeyId, "a"),
            (K::SecretAccessKey, "s")
        ])));
        assert!(configured(&builder(&[(K::SkipSignature, "true")])));
        assert!(configured(&builder(&[(
            K::ContainerCredentialsRelativeUri,
            "/v2/x"
        )])));
        assert!(!configured(&builder(&[(K::RoleArn, "arn:x")])));
    }

    #[tokio::test]
    async fn nothing_at_all_is_said_at_once() {
        // A metadata endpoint where nothing listens: port 1 on loopback.
        let b = builder(&[(K::MetadataEndpoint, "http://127.0.0.1:1")]);
        let started = std::time::Instant::now();
        let msg = missing(&b).await.expect("no credentials");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(msg.starts_with("no credentials"), "{msg}");
        assert!(msg.contains("AWS_ACCESS_KEY_ID"), "{msg}");
    }
}
