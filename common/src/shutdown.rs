//! Graceful shutdown for both binaries: on SIGTERM (or Ctrl-C) stop
//! accepting, give in-flight work a grace period, then exit cleanly.

use std::time::Duration;

use tokio::task::JoinHandle;

/// Resolves when the process is asked to stop: SIGTERM or Ctrl-C.
///
/// The handlers are installed when this is called, not when the future is
/// first polled: call it before announcing the listening address, or a
/// supervisor that stops the process right after the announcement kills
/// it with the default signal action instead of shutting it down.
#[cfg(unix)]
pub fn termination() -> impl std::future::Future<Output = ()> + Send {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = signal(SignalKind::terminate()).and_then(|term| {
        let interrupt = signal(SignalKind::interrupt())?;
        Ok((term, interrupt))
    });
    async move {
        match handlers {
            Ok((mut term, mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!("no SIGTERM handler ({e}); stopping on Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Resolves when the process is asked to stop (Ctrl-C).
#[cfg(not(unix))]
pub fn termination() -> impl std::future::Future<Output = ()> + Send {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Waits up to `grace` for a server that was told to stop; work still in
/// flight after that is dropped with the process.
pub async fn drain(
    server: JoinHandle<anyhow::Result<()>>,
    grace: Duration,
    name: &str,
) -> anyhow::Result<()> {
    match tokio::time::timeout(grace, server).await {
        Ok(result) => result?,
        Err(_) => {
            tracing::warn!("{name}: in-flight work did not finish within {grace:?}; stopping it");
            Ok(())
        }
    }
}

/// Parses a byte size: `1073741824`, `512M`, `4G`, `64K` (powers of 1024).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 512M or 4G"))?;
    let scale: usize = match unit.to_ascii_uppercase().trim_end_matches('B') {
        "" => 1,
        "K" | "KI" => 1 << 10,
        "M" | "MI" => 1 << 20,
        "G" | "GI" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    n.checked_mul(scale)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?} is not a usable size"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3T").is_err());
    }
}
