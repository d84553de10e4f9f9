//! watch-multi's Redis step: after the SQL conditional UPDATE has decided, the user's
//! counter key moves by an optimistic read-modify-write on a dedicated connection (WATCH,
//! GET, MULTI, SET, EXEC). A nil EXEC means another client changed the key in between:
//! nothing was written and the step runs again after a short jittered wait, up to
//! `MAX_WATCH_ATTEMPTS` tries; the
//! unwatched mutant runs the same steps without the WATCH, so a concurrent update is
//! silently overwritten.

use std::sync::atomic::Ordering;
use std::time::Duration;

use counterlab_core::{ErrorClass, OpError, Outcome, UserId};
use redis::AsyncCommands;

use super::classify_redis;
use super::designs::{Shared, after_sql, parse_delta};

/// Most tries of one optimistic counter update before the op gives up.
pub(super) const MAX_WATCH_ATTEMPTS: u32 = 16;

/// Why one try did not apply.
enum Failed {
    /// WATCH or GET failed: nothing was written.
    Before(OpError),
    /// The MULTI/EXEC went out: it may have run.
    MayHaveRun(OpError),
}

/// One try: returns false when EXEC reported a conflict (nothing written).
async fn rmw_once(c: &mut super::target::Conn, key: &str, delta: i64, watched: bool) -> Result<bool, Failed> {
    let before = |e| Failed::Before(classify_redis(e));
    if watched {
        redis::cmd("WATCH").arg(key).query_async::<()>(&mut *c).await.map_err(before)?;
    }
    let v: Option<String> = c.get(key).await.map_err(before)?;
    let next = v.as_deref().map_or(0, parse_delta) + delta;
    let r: Option<redis::Value> = redis::pipe()
        .atomic()
        .set(key, next)
        .query_async(&mut *c)
        .await
        .map_err(|e| Failed::MayHaveRun(classify_redis(e)))?;
    Ok(r.is_some())
}

/// Before try `attempt` (1..) on `user`'s counter: a wait spread over up to 0.1 ms
/// times 2^attempt (capped at 6.4 ms), so writers that just collided do not collide again
/// in lockstep. Spread by user, attempt and the clock; it shapes timing only, never an
/// op stream, so runs stay reproducible from their seed.
async fn backoff(user: UserId, attempt: u32) {
    let cap_us = 100u64 << attempt.min(6);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let spread = (user as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(nanos) ^ u64::from(attempt);
    tokio::time::sleep(Duration::from_micros(spread % cap_us.max(1))).await;
}

impl Shared {
    /// counter += delta by WATCH ... EXEC (`watched`) or by GET then MULTI/SET/EXEC (the
    /// mutant). A connection error before EXEC drops that connection and tries again on
    /// a fresh one (nothing was written); conflicts are counted (`watch_conflicts`) and a
    /// give-up is an unknown outcome of the serialization class: the SQL write committed,
    /// the counter did not move.
    pub(super) async fn watch_apply(&self, user: UserId, delta: i64, watched: bool) -> Result<(), OpError> {
        if delta == 0 {
            return Ok(());
        }
        let key = self.k(user, "unread");
        let mut wire_error = None;
        for attempt in 0..MAX_WATCH_ATTEMPTS {
            if attempt > 0 {
                backoff(user, attempt).await;
            }
            let mut lease = match self.space.dedicated(&key).await {
                Ok(l) => l,
                Err(e) if e.class == ErrorClass::Connection => {
                    wire_error = Some(e);
                    continue;
                }
                Err(e) => return Err(after_sql(e)),
            };
            match rmw_once(lease.conn(), &key, delta, watched).await {
                Ok(true) => {
                    lease.clean();
                    return self.lose_reply();
                }
                Ok(false) => {
                    // EXEC ended the WATCH: the connection is clean.
                    lease.clean();
                    wire_error = None;
                    self.figures.watch_conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Err(Failed::Before(e)) if e.class == ErrorClass::Connection => wire_error = Some(e),
                Err(Failed::Before(e) | Failed::MayHaveRun(e)) => return Err(after_sql(e)),
            }
        }
        if let Some(e) = wire_error {
            return Err(after_sql(e));
        }
        self.figures.watch_give_ups.fetch_add(1, Ordering::Relaxed);
        Err(OpError::new(
            ErrorClass::Serialization,
            Outcome::Unknown,
            format!(
                "redis: {key} changed under WATCH {MAX_WATCH_ATTEMPTS} times; gave up after the SQL write committed"
            ),
        ))
    }
}
