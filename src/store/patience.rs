//! How long one request to an object store may take and how often a
//! failed one is tried again: the client's timeouts and retries, set from
//! the environment like everything else about a store. Each setting has
//! `object_store`'s own name (`timeout`, `connect_timeout`, `read_timeout`
//! of `ClientOptions`; `max_retries`, `retry_timeout` of `RetryConfig`),
//! spelled as a variable with the store's prefix (`AWS_TIMEOUT`,
//! `GOOGLE_MAX_RETRIES`, `AZURE_READ_TIMEOUT`: the prefix `from_env`
//! reads) or, for every store and the only one for `http(s)://`, with
//! ours (`SAFETENSORS_STREAM_TIMEOUT`); the store's own wins.
//!
//! The retry defaults suit a batch job, where a stuck object should fail
//! its run in about a minute rather than three: `object_store` retries up
//! to 10 times for 3 minutes, so a body that stalls was refused only after
//! 182 s (six 30 s timeouts); here 3 retries within 60 s.

use std::time::Duration;

use object_store::{ClientConfigKey, RetryConfig};

/// Our prefix: every store, and the only one an `http(s)://` store reads.
const OURS: &str = "SAFETENSORS_STREAM_";

/// Retries of one request after its first try, unless set.
const DEFAULT_MAX_RETRIES: usize = 3;

/// No retry starts this long after the first try, unless set.
const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// The client's timeouts a variable may set (the others keep
/// `object_store`'s defaults: 30 s a request, 5 s to connect, no read
/// timeout).
const TIMEOUTS: [ClientConfigKey; 3] = [
    ClientConfigKey::Timeout,
    ClientConfigKey::ConnectTimeout,
    ClientConfigKey::ReadTimeout,
];

/// The timeouts and retries one store's client uses.
#[derive(Debug, Clone)]
pub(crate) struct Patience {
    /// Timeouts to set on the client, as `object_store` spells their
    /// values (`30s`, `500ms`), checked here so that a bad one names its
    /// variable (the store's own `from_env` read them too, unchecked).
    pub(crate) timeouts: Vec<(ClientConfigKey, String)>,
    /// How often, and for how long, a failed request is tried again.
    pub(crate) retry: RetryConfig,
}

impl Patience {
    /// The settings for a store whose `from_env` reads variables starting
    /// with `prefix` (`AWS_`; `None` for `http(s)://`), from the
    /// environment; a value that is no duration or count is a message
    /// naming its variable.
    pub(crate) fn from_env(prefix: Option<&str>) -> Result<Patience, String> {
        Self::from_vars(prefix, |name| std::env::var(name).ok())
    }

    /// [`Patience::from_env`] with the variables `get` gives.
    fn from_vars(
        prefix: Option<&str>,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Patience, String> {
        let var = |name: String| {
            get(&name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (name, v))
        };
        let own = |key: &str| prefix.and_then(|p| var(format!("{p}{}", key.to_uppercase())));
        let setting = |key: &str| own(key).or_else(|| var(format!("{OURS}{}", key.to_uppercase())));
        let mut timeouts = Vec::new();
        for key in TIMEOUTS {
            if let Some((name, value)) = setting(key.as_ref()) {
                duration(&name, &value)?;
                timeouts.push((key, value));
            }
        }
        let mut retry = RetryConfig {
            max_retries: DEFAULT_MAX_RETRIES,
            retry_timeout: DEFAULT_RETRY_TIMEOUT,
            ..RetryConfig::default()
        };
        if let Some((name, value)) = setting("max_retries") {
            let count = value.trim().parse().ok();
            retry.max_retries = count.ok_or_else(|| bad(&name, &value, "a number of retries"))?;
        }
        if let Some((name, value)) = setting("retry_timeout") {
            retry.retry_timeout = duration(&name, &value)?;
        }
        Ok(Patience { timeouts, retry })
    }

    /// `builder` with these retries and timeouts, through its own setters
    /// (`with_retry`, and `with_config` of a client key as the store's
    /// builder wraps it): one fold for every kind of store.
    pub(crate) fn apply<B>(
        self,
        builder: B,
        with_retry: impl FnOnce(B, RetryConfig) -> B,
        with_config: impl Fn(B, ClientConfigKey, String) -> B,
    ) -> B {
        let builder = with_retry(builder, self.retry);
        self.timeouts
            .into_iter()
            .fold(builder, |b, (key, value)| with_config(b, key, value))
    }
}

/// `value` of the variable `name` as a duration, in `object_store`'s
/// syntax (`30s`, `1m 30s`, `500ms`).
fn duration(name: &str, value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value.trim()).map_err(|_| bad(name, value, "a duration like 30s"))
}

/// The message for a variable whose value is not what it takes.
fn bad(name: &str, value: &str, want: &str) -> String {
    format!("{name}={value:?}: want {want}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(prefix: Option<&str>, pairs: &[(&str, &str)]) -> Result<Patience, String> {
        let get = |name: &str| pairs.iter().find(|(k, _)| *k == name);
        Patience::from_vars(prefix, |name| get(name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn defaults_retry_three_times_within_a_minute() {
        let p = with(Some("AWS_"), &[]).unwrap();
        assert!(p.timeouts.is_empty());
        assert_eq!(p.retry.max_retries, 3);
        assert_eq!(p.retry.retry_timeout, Duration::from_secs(60));
    }

    #[test]
    fn ours_sets_every_store_and_the_stores_own_wins() {
        let ours = [
            ("SAFETENSORS_STREAM_TIMEOUT", "5s"),
            ("SAFETENSORS_STREAM_READ_TIMEOUT", "2s"),
            ("SAFETENSORS_STREAM_MAX_RETRIES", "0"),
            ("SAFETENSORS_STREAM_RETRY_TIMEOUT", "1m 30s"),
        ];
        let http = with(None, &ours).unwrap();
        let set = |p: &Patience| {
            p.timeouts
                .iter()
                .map(|(k, v)| (*k, v.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            set(&http),
            [
                (ClientConfigKey::Timeout, "5s".to_string()),
                (ClientConfigKey::ReadTimeout, "2s".to_string())
            ]
        );
        assert_eq!(http.retry.max_retries, 0);
        assert_eq!(http.retry.retry_timeout, Duration::from_secs(90));
        // The store's own variables win over ours.
        let mut both = ours.to_vec();
        both.extend([("AWS_TIMEOUT", "9s"), ("AWS_MAX_RETRIES", "7")]);
        let s3 = with(Some("AWS_"), &both).unwrap();
        assert_eq!(
            set(&s3),
            [
                (ClientConfigKey::Timeout, "9s".to_string()),
                (ClientConfigKey::ReadTimeout, "2s".to_string())
            ]
        );
        assert_eq!(s3.retry.max_retries, 7);
        // Another store's variables are not ours to read.
        let gcs = with(Some("GOOGLE_"), &both).unwrap();
        assert_eq!(gcs.retry.max_retries, 0);
        assert_eq!(set(&gcs).len(), 2);
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (name, value) in [
            ("SAFETENSORS_STREAM_TIMEOUT", "soon"),
            ("AWS_READ_TIMEOUT", "5"),
            ("SAFETENSORS_STREAM_MAX_RETRIES", "-1"),
            ("AZURE_RETRY_TIMEOUT", "forever"),
        ] {
            let prefix = name.split_inclusive('_').next();
            let e = with(prefix, &[(name, value)]).unwrap_err();
            assert!(e.contains(name) && e.contains(value), "{e}");
        }
    }
}
