//! `--spill-dir` and `--spill-limit`, and the directory one process owns
//! inside that root, which several processes share (the workers and the
//! coordinator of one host).
//!
//! Each owner holds an exclusive lock on `NAME.lock` beside its `NAME`
//! directory for its whole life; the OS releases it when the process ends,
//! however it ends. A process claiming a directory first removes every
//! directory of the same prefix whose lock nobody holds: what a killed
//! process left there is no one's. A graceful owner removes its own on drop.
//! Names carry the process id and a counter, so processes on random ports
//! (embedded workers, tests) never share one, and nothing accumulates.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};

/// Where a process spills, and how much.
#[derive(Debug, Clone)]
pub struct SpillSettings {
    /// The shared root; each process uses a directory of its own in it.
    pub dir: PathBuf,
    /// Most bytes the process may put there.
    pub limit: u64,
}

impl Default for SpillSettings {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir().join("squadron-spill"),
            limit: 100 << 30,
        }
    }
}

impl SpillSettings {
    /// Claims this process's directory (`prefix` names the kind of
    /// process) and a disk manager that spills there within the limit.
    /// Keep the directory as long as the disk manager.
    pub fn claim(&self, prefix: &str) -> io::Result<(OwnedDir, DiskManagerBuilder)> {
        let dir = OwnedDir::claim(&self.dir, prefix).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("claiming a spill directory in {}: {e}", self.dir.display()),
            )
        })?;
        let disk = DiskManagerBuilder::default()
            .with_mode(DiskManagerMode::Directories(vec![dir.path().to_path_buf()]))
            .with_max_temp_directory_size(self.limit);
        Ok((dir, disk))
    }
}

/// A lock file younger than this is left alone by the clean-up: its owner
/// may be between creating it and locking it.
const CLAIM_GRACE: Duration = Duration::from_secs(10);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// This process's directory; removed with its lock on drop.
#[derive(Debug)]
pub struct OwnedDir {
    path: PathBuf,
    lock_path: PathBuf,
    _lock: File,
}

impl OwnedDir {
    /// Claims a new directory `root/PREFIX<pid>-<n>`, after removing the
    /// abandoned ones of `prefix` in `root`.
    pub fn claim(root: &Path, prefix: &str) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        remove_abandoned(root, prefix);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}{}-{n}", std::process::id());
        let lock_path = root.join(format!("{name}.lock"));
        let lock = File::create(&lock_path)?;
        lock.try_lock().map_err(io::Error::other)?;
        let path = root.join(name);
        std::fs::create_dir_all(&path)?;
        Ok(Self {
            path,
            lock_path,
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OwnedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// Removes the directories of `prefix` in `root` whose owner is gone.
fn remove_abandoned(root: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(dir) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(".lock"))
        else {
            continue;
        };
        let recent = entry
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().unwrap_or_default() < CLAIM_GRACE)
            .unwrap_or(true);
        if recent {
            continue;
        }
        let Ok(lock) = File::open(entry.path()) else {
            continue;
        };
        if lock.try_lock().is_ok() {
            let _ = std::fs::remove_dir_all(root.join(format!("{prefix}{dir}")));
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path) {
        let old = std::time::SystemTime::now() - 2 * CLAIM_GRACE;
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }

    #[test]
    fn an_owned_directory_is_kept_while_owned_and_an_abandoned_one_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let owned = OwnedDir::claim(root.path(), "worker-").unwrap();
        std::fs::write(owned.path().join("spill"), b"x").unwrap();
        age(&owned.lock_path);
        // Left by a killed process: a directory and a lock nobody holds.
        let abandoned = root.path().join("worker-1-0");
        std::fs::create_dir(&abandoned).unwrap();
        std::fs::write(abandoned.join("spill"), b"x").unwrap();
        let abandoned_lock = root.path().join("worker-1-0.lock");
        File::create(&abandoned_lock).unwrap();
        age(&abandoned_lock);
        // Another kind of owner in the same root is not touched.
        let other = OwnedDir::claim(root.path(), "coordinator-").unwrap();

        let second = OwnedDir::claim(root.path(), "worker-").unwrap();
        assert!(!abandoned.exists() && !abandoned_lock.exists());
        assert!(owned.path().join("spill").exists(), "a held one stays");
        assert!(other.path().exists());
        assert_ne!(owned.path(), second.path());

        let path = owned.path().to_path_buf();
        drop(owned);
        assert!(!path.exists(), "its owner removes it on drop");
    }
}
