//! A run's interrupt as the check sees it: once the run is stopped (Ctrl-C, SIGTERM,
//! SIGHUP), the check's calls into the strategy (the settled reads) get one grace period
//! in all, so a `read_count` that runs to its op timeout each time cannot hold the exit.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the flag is looked at.
const POLL: Duration = Duration::from_millis(20);

/// The run's cancel flag and the grace the check still gets once it is raised.
pub(super) struct Stop {
    flag: Arc<AtomicBool>,
    grace: Duration,
    /// When the grace ends: fixed by the first caller that sees the flag raised.
    at: OnceLock<Instant>,
}

impl Stop {
    pub(super) fn new(flag: Arc<AtomicBool>, grace: Duration) -> Stop {
        Stop { flag, grace, at: OnceLock::new() }
    }

    /// Resolves `grace` after the flag was first seen raised (the same instant for
    /// every caller); never while the run goes on.
    pub(super) async fn reached(&self) {
        while !self.flag.load(Ordering::Relaxed) {
            tokio::time::sleep(POLL).await;
        }
        let at = *self.at.get_or_init(|| Instant::now() + self.grace);
        tokio::time::sleep_until(at.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_grace_starts_once_and_is_shared() {
        let grace = Duration::from_millis(300);
        let flag = Arc::new(AtomicBool::new(false));
        let stop = Stop::new(flag.clone(), grace);
        assert!(tokio::time::timeout(grace, stop.reached()).await.is_err(), "resolved before the flag");
        flag.store(true, Ordering::Relaxed);
        let started = Instant::now();
        stop.reached().await;
        assert!(started.elapsed() >= grace);
        // A later caller gets no grace of its own.
        let again = Instant::now();
        stop.reached().await;
        assert!(again.elapsed() < grace, "{:?}", again.elapsed());
    }
}
