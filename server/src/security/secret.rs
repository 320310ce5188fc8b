//! Signing secrets kept in files (`--token-secret-file` and the like).

/// A secret from a file: its bytes without a trailing newline, at least 32.
pub fn read_secret(file: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let mut secret =
        std::fs::read(file).map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    if secret.last() == Some(&b'\n') {
        secret.pop();
    }
    anyhow::ensure!(
        secret.len() >= 32,
        "{}: a signing secret needs at least 32 bytes",
        file.display()
    );
    Ok(secret)
}
