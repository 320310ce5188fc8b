//! Where the `.slt` files are, and the directory they run in.
//!
//! The files come from the `datafusion-sqllogictest` package that Cargo
//! downloaded (found with `cargo metadata`), or from `--corpus`. They were
//! written to run from that package's root: they read `test_files/…` and
//! `data/…` and write under `test_files/scratch/<file>/`. The runner works
//! in a scratch copy of that layout — links to the package's files, and a
//! writable `scratch/` — so the package itself is never written to.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context};

const PACKAGE: &str = "datafusion-sqllogictest";

/// The package root holding `test_files/` (and `data/`).
pub fn locate(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        let root = if path.ends_with("test_files") {
            path.parent().unwrap_or(path).to_path_buf()
        } else {
            path.to_path_buf()
        };
        if !root.join("test_files").is_dir() {
            bail!("--corpus {}: no test_files/ there", path.display());
        }
        return Ok(root);
    }
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--manifest-path", manifest])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| packages.iter().find(|p| p["name"] == PACKAGE))
        .ok_or_else(|| anyhow!("{PACKAGE} is not in cargo metadata"))?;
    let manifest_path = package["manifest_path"]
        .as_str()
        .ok_or_else(|| anyhow!("{PACKAGE} has no manifest path"))?;
    let root = Path::new(manifest_path)
        .parent()
        .ok_or_else(|| anyhow!("{manifest_path} has no parent"))?
        .to_path_buf();
    if !root.join("test_files").is_dir() {
        bail!("{} has no test_files/", root.display());
    }
    Ok(root)
}

/// The package's version, from its directory name (`…-55.2.0`).
pub fn version(root: &Path) -> String {
    root.file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.rsplit('-').next())
        .unwrap_or("unknown")
        .to_string()
}

/// Every `.slt` file under `test_files/`, as paths relative to it, sorted.
/// (`.slt.part` files are only pulled in by `include`.)
pub fn files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let base = root.join("test_files");
    let mut found = vec![];
    let mut dirs = vec![base.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                if !path.ends_with("scratch") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "slt") {
                found.push(path.strip_prefix(&base)?.to_path_buf());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// A directory laid out like the package root: `test_files/*` and `data`
/// link to the package, `test_files/scratch/` is real and writable.
pub struct WorkDir {
    dir: tempfile::TempDir,
}

impl WorkDir {
    pub fn new(root: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("squadron-slt-").tempdir()?;
        let test_files = dir.path().join("test_files");
        std::fs::create_dir(&test_files)?;
        for entry in std::fs::read_dir(root.join("test_files"))? {
            let entry = entry?;
            if entry.file_name() != "scratch" {
                std::os::unix::fs::symlink(entry.path(), test_files.join(entry.file_name()))?;
            }
        }
        std::fs::create_dir(test_files.join("scratch"))?;
        if root.join("data").is_dir() {
            std::os::unix::fs::symlink(root.join("data"), dir.path().join("data"))?;
        }
        Ok(Self { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// An empty `test_files/scratch/<file stem>/` for the file about to
    /// run (its files write there), as DataFusion's runner makes it.
    pub fn fresh_scratch(&self, file: &Path) -> anyhow::Result<()> {
        let stem = file.file_stem().unwrap_or_default();
        let scratch = self.dir.path().join("test_files/scratch").join(stem);
        if scratch.exists() {
            std::fs::remove_dir_all(&scratch)?;
        }
        std::fs::create_dir_all(&scratch)?;
        Ok(())
    }

    /// The `.slt` file itself, through the links (so `include` resolves
    /// next to it).
    pub fn file(&self, file: &Path) -> PathBuf {
        self.dir.path().join("test_files").join(file)
    }
}
