//! The table format Squadron creates tables in: Parquet (or Arrow IPC)
//! part files laid out for scans, each named by the task attempt that
//! wrote it, and the rows a write reports back for its commit.

pub mod parquet_layout;
pub mod part_file;
pub mod table_rows;
pub mod written;

pub use part_file::{PartFile, PartTarget, WrittenFile};
pub use table_rows::{as_table_rows, check_storable, StoredFormat};
pub use written::{read_written, written_batch, written_schema, Written};

/// A table or warehouse location as a URL: object store URLs as given,
/// a local path made absolute as `file:///…`, always ending in `/` (a
/// directory).
pub fn location_url(location: &str) -> anyhow::Result<url::Url> {
    let mut url = if location.contains("://") {
        url::Url::parse(location).map_err(|e| anyhow::anyhow!("{location}: {e}"))?
    } else {
        let path = std::path::absolute(location)?;
        url::Url::from_directory_path(&path)
            .map_err(|_| anyhow::anyhow!("{}: not a usable directory path", path.display()))?
    };
    if !url.path().ends_with('/') {
        url.set_path(&format!("{}/", url.path()));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::location_url;

    #[test]
    fn locations_become_directory_urls() {
        assert_eq!(location_url("s3://b/w").unwrap().as_str(), "s3://b/w/");
        assert_eq!(location_url("s3://b/w/").unwrap().as_str(), "s3://b/w/");
        assert_eq!(location_url("/srv/wh").unwrap().as_str(), "file:///srv/wh/");
        let relative = location_url("wh").unwrap();
        assert!(relative.as_str().starts_with("file:///"), "{relative}");
        assert!(relative.as_str().ends_with("/wh/"), "{relative}");
    }
}
