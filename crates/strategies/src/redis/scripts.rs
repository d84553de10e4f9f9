//! A strategy file's Lua script that never returns: the run ends it. Redis has no time
//! bound of its own below `busy-reply-threshold` (then it answers BUSY to every client
//! until the script is killed), so a script call abandoned by its op (timed out) sends
//! `SCRIPT KILL` from the configured account, bounded, and teardown does the same first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use counterlab_core::{ErrorClass, OpError, Outcome};

use super::RedisSpace;

/// How many `SCRIPT KILL` rounds a node gets, and how long each may wait for Redis to
/// take it (Redis answers other clients only past `busy-reply-threshold`).
const KILL_ROUNDS: u32 = 20;
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Armed while one of the space's scripts runs: dropped armed (its op timed out, or the
/// run stopped), it kills the script in the background (the space is cloned only then,
/// not per call).
pub(crate) struct ScriptGuard<'a> {
    space: Option<&'a RedisSpace>,
}

impl ScriptGuard<'_> {
    pub(crate) fn disarm(mut self) {
        self.space = None;
    }
}

impl Drop for ScriptGuard<'_> {
    fn drop(&mut self) {
        let Some(space) = self.space.take().cloned() else { return };
        space.abandoned.store(true, Ordering::Relaxed);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            // A failure leaves the flag set: teardown tries again and reports it.
            rt.spawn(async move { space.end_busy_script().await });
        }
    }
}

impl RedisSpace {
    /// A guard for one script call of this space (see `ScriptGuard`).
    pub(crate) fn script_guard(&self) -> ScriptGuard<'_> {
        ScriptGuard { space: Some(self) }
    }

    /// Whether a script of this space was abandoned while running.
    pub fn abandoned_script(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// Kills a running script on every primary (`SCRIPT KILL` until Redis says none
    /// runs), at most `KILL_ROUNDS` rounds of `KILL_WAIT` each. On a shared server the
    /// script killed is whichever runs: sent only after a script of this run did not
    /// return. A script that wrote before it looped cannot be killed (Redis answers
    /// UNKILLABLE; only `SHUTDOWN NOSAVE` ends it): an error saying so.
    pub async fn end_busy_script(&self) -> Result<(), OpError> {
        let fail = |m: String| OpError::new(ErrorClass::Other, Outcome::Fail, m);
        let nodes = self.client.node_conns(true).await.map_err(super::classify_redis)?;
        for mut node in nodes {
            let mut done = false;
            for _ in 0..KILL_ROUNDS {
                let mut kill = redis::cmd("SCRIPT");
                kill.arg("KILL");
                match tokio::time::timeout(KILL_WAIT, kill.query_async::<()>(&mut node)).await {
                    Ok(Ok(())) | Err(_) => continue,
                    Ok(Err(e)) if e.code() == Some("NOTBUSY") => {
                        done = true;
                        break;
                    }
                    Ok(Err(e)) if e.code() == Some("UNKILLABLE") => {
                        return Err(fail(format!(
                            "a script of this run wrote and then ran on: Redis cannot kill it (only SHUTDOWN NOSAVE ends it): {e}"
                        )));
                    }
                    Ok(Err(e)) => return Err(super::classify_redis(e)),
                }
            }
            if !done {
                return Err(fail(format!("a script still ran after {KILL_ROUNDS} SCRIPT KILL rounds")));
            }
        }
        self.abandoned.store(false, Ordering::Relaxed);
        Ok(())
    }
}

/// The flag a space's clones share.
pub(crate) fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}
