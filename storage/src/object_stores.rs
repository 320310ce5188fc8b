//! Where remote tables live: S3 (and S3-compatible stores), Google Cloud
//! Storage, Azure and plain HTTP(S), through the `object_store` crate
//! DataFusion reads with.
//!
//! The coordinator and every worker build their stores the same way, from
//! the URL a plan names plus their own environment: credentials come from
//! each cloud's standard variables, files and instance metadata, never
//! from a plan, a flag or a log line. Only non-secret store options
//! (endpoint, region, path style, `allow_http` for tests) are given with
//! `--store URL?KEY=VALUE&…`, per bucket or for a whole scheme.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use url::Url;

/// How many remote stores (buckets, containers, hosts) a process keeps.
/// Every table location names one; a client defining tables over ever new
/// buckets must not grow the map without bound.
const MAX_STORES: usize = 256;

/// Retries of one request. object_store's default (10 retries within 3
/// minutes) leaves a query over an unreachable endpoint hanging for
/// minutes; a database should say UNAVAILABLE within seconds.
const MAX_RETRIES: usize = 3;
const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// The store schemes Squadron builds clients for.
const SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https",
];

/// One `--store` flag: options for the stores of `scheme` (and of one
/// bucket or host when given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    scheme: String,
    bucket: Option<String>,
    options: Vec<(String, String)>,
}

impl std::str::FromStr for StoreOptions {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        // Errors never repeat the flag: its values may be secrets given by
        // mistake.
        let url = Url::parse(text)
            .map_err(|e| format!("--store: {e}; expected SCHEME://[BUCKET][?KEY=VALUE&…]"))?;
        let scheme = url.scheme().to_string();
        if !SCHEMES.contains(&scheme.as_str()) {
            return Err(format!(
                "--store: unknown scheme {scheme:?}; one of {}",
                SCHEMES.join(", ")
            ));
        }
        let options: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some((key, _)) = options.iter().find(|(k, _)| is_credential(k)) {
            return Err(format!(
                "--store {scheme}://…: {key} is a credential; give credentials through the \
                 environment or the cloud's credential files, never on the command line"
            ));
        }
        let spec = Self {
            bucket: url.host_str().filter(|h| !h.is_empty()).map(str::to_string),
            scheme,
            options,
        };
        // Unknown keys fail here, at start-up, not on the first query.
        let probe = Url::parse(&format!(
            "{}://{}",
            spec.scheme,
            spec.bucket.as_deref().unwrap_or("probe")
        ))
        .map_err(|e| e.to_string())?;
        build_store(&probe, &spec.options)
            .map(|_| ())
            .map_err(|e| format!("--store {}://…: {e}", spec.scheme))?;
        Ok(spec)
    }
}

impl StoreOptions {
    /// Every `--store` flag; the first bad one is the error.
    pub fn parse_all(flags: &[String]) -> anyhow::Result<Vec<Self>> {
        flags
            .iter()
            .map(|flag| flag.parse().map_err(|e: String| anyhow::anyhow!(e)))
            .collect()
    }

    /// This as the `--store` flag it came from, for a process started with
    /// the same options (the coordinator's embedded workers). Never holds a
    /// credential: those are refused when parsed.
    pub fn to_flag(&self) -> String {
        let mut url = Url::parse(&format!(
            "{}://{}",
            self.scheme,
            self.bucket.as_deref().unwrap_or_default()
        ))
        .expect("parsed from a URL of this scheme and bucket");
        if !self.options.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.options);
        }
        url.to_string()
    }

    fn applies_to(&self, url: &Url) -> bool {
        self.scheme == url.scheme()
            && self
                .bucket
                .as_deref()
                .is_none_or(|bucket| Some(bucket) == url.host_str())
    }
}

/// Keys that carry secrets. Refused in `--store` so that they never sit in
/// a command line, a process listing or a config dump.
fn is_credential(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "secret",
        "access_key",
        "token",
        "sas",
        "password",
        "service_account_key",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// The object stores of one process: local files as DataFusion has them,
/// remote stores built on first use from the URL and the `--store`
/// options that apply to it (scheme-wide first, then the bucket's own).
pub struct ObjectStores {
    known: DefaultObjectStoreRegistry,
    remote: DashMap<String, Arc<dyn ObjectStore>>,
    options: Vec<StoreOptions>,
    max_stores: usize,
}

impl std::fmt::Debug for ObjectStores {
    // Store clients hold credentials: only their keys are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = self.remote.iter().map(|e| e.key().clone()).collect();
        f.debug_struct("ObjectStores")
            .field("remote", &keys)
            .finish()
    }
}

impl ObjectStores {
    pub fn new(options: Vec<StoreOptions>) -> Self {
        Self {
            known: DefaultObjectStoreRegistry::new(),
            remote: DashMap::new(),
            options,
            max_stores: MAX_STORES,
        }
    }

    fn options_for(&self, url: &Url) -> Vec<(String, String)> {
        let mut matching: Vec<&StoreOptions> =
            self.options.iter().filter(|o| o.applies_to(url)).collect();
        // A bucket's own options override the scheme's.
        matching.sort_by_key(|o| o.bucket.is_some());
        matching
            .into_iter()
            .flat_map(|o| o.options.iter().cloned())
            .collect()
    }
}

impl ObjectStoreRegistry for ObjectStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.known.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.known.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        if let Ok(store) = self.known.get_store(url) {
            return Ok(store);
        }
        if !SCHEMES.contains(&url.scheme()) {
            return Err(DataFusionError::Plan(format!(
                "no object store for {url}: Squadron reads file paths and {} URLs",
                SCHEMES.join(", ")
            )));
        }
        let key = store_key(url);
        if let Some(store) = self.remote.get(&key) {
            return Ok(Arc::clone(store.value()));
        }
        if self.remote.len() >= self.max_stores {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "{key}: this process already uses {} object stores",
                self.max_stores
            )));
        }
        let store = build_store(url, &self.options_for(url))
            .map_err(|e| DataFusionError::Plan(format!("object store for {key}: {e}")))?;
        Ok(Arc::clone(self.remote.entry(key).or_insert(store).value()))
    }
}

/// `scheme://bucket` (with the port of an HTTP host): one client each.
fn store_key(url: &Url) -> String {
    format!(
        "{}://{}",
        url.scheme(),
        &url[url::Position::BeforeHost..url::Position::AfterPort]
    )
}

fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
        ..RetryConfig::default()
    }
}

/// A client for the store `url` names, credentials from the environment.
fn build_store(
    url: &Url,
    options: &[(String, String)],
) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
    let base = store_key(url);
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "s3" | "s3a" => {
            let mut builder = AmazonS3Builder::from_env().with_url(base);
            for (key, value) in options {
                builder = builder.with_config(key.parse::<AmazonS3ConfigKey>()?, value);
            }
            Arc::new(builder.with_retry(retry()).build()?)
        }
        "gs" => {
            let mut builder = GoogleCloudStorageBuilder::from_env().with_url(base);
            for (key, value) in options {
                builder = builder.with_config(key.parse::<GoogleConfigKey>()?, value);
            }
            Arc::new(builder.with_retry(retry()).build()?)
        }
        "http" | "https" => {
            let mut builder = HttpBuilder::new().with_url(base);
            for (key, value) in options {
                builder = builder.with_config(key.parse::<ClientConfigKey>()?, value);
            }
            Arc::new(builder.with_retry(retry()).build()?)
        }
        _ => {
            let mut builder = MicrosoftAzureBuilder::from_env().with_url(url.as_str());
            for (key, value) in options {
                builder = builder.with_config(key.parse::<AzureConfigKey>()?, value);
            }
            Arc::new(builder.with_retry(retry()).build()?)
        }
    };
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_options_survive_the_trip_through_their_flag() {
        for flag in [
            "s3://tpch?endpoint=http://127.0.0.1:9000&allow_http=true",
            "s3://?region=eu-west-1",
            "gs://bucket",
        ] {
            let spec: StoreOptions = flag.parse().unwrap();
            let again: StoreOptions = spec.to_flag().parse().unwrap();
            assert_eq!(again, spec, "{flag} became {}", spec.to_flag());
        }
    }

    #[test]
    fn parses_store_options_per_bucket_and_scheme() {
        let spec: StoreOptions = "s3://tpch?endpoint=http://127.0.0.1:9000&allow_http=true"
            .parse()
            .unwrap();
        assert_eq!(spec.bucket.as_deref(), Some("tpch"));
        assert_eq!(spec.options.len(), 2);
        let all: StoreOptions = "s3://?region=eu-west-1".parse().unwrap();
        assert_eq!(all.bucket, None);
        let tpch = Url::parse("s3://tpch/lineitem/").unwrap();
        let other = Url::parse("s3://other/x.parquet").unwrap();
        assert!(spec.applies_to(&tpch) && !spec.applies_to(&other));
        assert!(all.applies_to(&tpch) && all.applies_to(&other));
        let stores = ObjectStores::new(vec![spec, all]);
        let options = stores.options_for(&tpch);
        // Scheme-wide options come first, so the bucket's own win.
        assert_eq!(options[0].0, "region");
    }

    #[test]
    fn refuses_credentials_unknown_keys_and_schemes() {
        for text in [
            "s3://b?aws_secret_access_key=x",
            "s3://b?access_key_id=x",
            "az://c?azure_storage_sas_key=x",
            "s3://b?no_such_option=1",
            "ftp://host",
            "not a url",
        ] {
            let error = text.parse::<StoreOptions>().expect_err(text);
            assert!(!error.contains("=x"), "{error}");
        }
    }

    #[tokio::test]
    async fn builds_one_client_per_bucket_and_bounds_them() {
        let stores = ObjectStores {
            max_stores: 4,
            ..ObjectStores::new(vec![])
        };
        let a = stores.get_store(&Url::parse("s3://a/x").unwrap()).unwrap();
        let again = stores.get_store(&Url::parse("s3://a/y").unwrap()).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        let local = stores.get_store(&Url::parse("file:///tmp").unwrap());
        assert!(local.is_ok());
        let unknown = stores.get_store(&Url::parse("ftp://host/x").unwrap());
        assert!(unknown.unwrap_err().to_string().contains("ftp://host/x"));
        for i in 0..stores.max_stores {
            let _ = stores.get_store(&Url::parse(&format!("s3://b{i}/x")).unwrap());
        }
        let refused = stores.get_store(&Url::parse("s3://one-too-many/x").unwrap());
        assert!(matches!(
            refused,
            Err(DataFusionError::ResourcesExhausted(_))
        ));
    }
}
