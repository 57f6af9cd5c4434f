//! SIGINT and SIGTERM: the first asks the running command to finish cleanly
//! (a group consumer commits what it printed and leaves its group, a
//! producer delivers what it already read); a second one exits at once.

use std::sync::OnceLock;

use tokio::sync::watch;

/// The name of the first signal received, once one was.
static REQUESTED: OnceLock<watch::Sender<Option<&'static str>>> = OnceLock::new();

fn sender() -> &'static watch::Sender<Option<&'static str>> {
    REQUESTED.get_or_init(|| watch::channel(None).0)
}

/// Starts listening for SIGINT and SIGTERM. Call once, inside the runtime.
///
/// # Errors
/// The signal handlers could not be installed.
pub fn install() -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("handling SIGINT: {e}"))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("handling SIGTERM: {e}"))?;
    tokio::spawn(async move {
        let mut received = 0;
        loop {
            let name = tokio::select! {
                _ = interrupt.recv() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            };
            received += 1;
            if received > 1 {
                eprintln!("weir: error: {name} again; exiting without closing");
                std::process::exit(130);
            }
            tracing::info!(signal = name, "closing; send it again to exit at once");
            sender().send_replace(Some(name));
        }
    });
    Ok(())
}

/// Waits until SIGINT or SIGTERM was received and returns its name.
/// Cancel-safe; returns at once if one already was.
pub async fn requested() -> &'static str {
    let mut seen = sender().subscribe();
    loop {
        if let Some(name) = *seen.borrow_and_update() {
            return name;
        }
        if seen.changed().await.is_err() {
            // The sender lives in a static and is never dropped.
            std::future::pending::<()>().await;
        }
    }
}
