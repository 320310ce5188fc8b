//! Where the workers are.
//!
//! `get_urls()` is synchronous and cheap: implementations answer from a
//! snapshot (dynamic ones refresh it in the background), so planning never
//! waits on discovery.

use std::sync::Arc;

/// The source of truth about which workers exist.
pub trait WorkerResolver: Send + Sync + 'static {
    /// The Flight/gRPC URLs of the workers available now.
    fn get_urls(&self) -> Vec<String>;
}

/// A fixed list of workers (`--workers`, or the embedded local workers).
#[derive(Debug, Clone)]
pub struct StaticResolver {
    urls: Arc<Vec<String>>,
}

impl StaticResolver {
    pub fn new(urls: Vec<String>) -> Self {
        Self {
            urls: Arc::new(urls),
        }
    }
}

impl WorkerResolver for StaticResolver {
    fn get_urls(&self) -> Vec<String> {
        self.urls.as_ref().clone()
    }
}

/// Normalizes a worker address from the command line: `host:port` becomes
/// `http://host:port`.
pub fn normalize_url(url: &str) -> String {
    let url = url.trim();
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_resolver_returns_its_list() {
        let r = StaticResolver::new(vec!["http://a:1".into(), "http://b:2".into()]);
        assert_eq!(r.get_urls(), vec!["http://a:1", "http://b:2"]);
    }

    #[test]
    fn bare_addresses_get_a_scheme() {
        assert_eq!(normalize_url("10.0.0.1:50061"), "http://10.0.0.1:50061");
        assert_eq!(normalize_url(" http://w:1 "), "http://w:1");
    }
}
