//! SQLite's busy wait, made visible: a busy handler that sleeps as SQLite's own
//! `busy_timeout` handler does, and counts the namespace's connections that are inside it
//! now, so the explorer sees a session waiting on SQLite's lock as it sees one waiting on
//! a PostgreSQL or MariaDB lock, instead of guessing from a delay.
//!
//! SQLite calls the handler when a lock it needs is held by another connection; when the
//! handler returns non-zero it tries the lock again, and calls the handler again if the
//! lock is still held. So a connection is waiting exactly while it sleeps in here (the
//! retry between two sleeps takes microseconds): `Waiters::now` is a count of real
//! waiters, never a guess. In `quick` mode (the explorer's) each sleep is 1 ms, so a
//! waiter whose lock was released goes on within a millisecond; otherwise the sleeps
//! follow SQLite's own schedule (1, 2, 5, ... 100 ms), so a load run behaves as before.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// SQLite's default busy handler's sleeps (ms) and their running totals
/// (`sqliteDefaultBusyCallback` in main.c).
const DELAYS: [u64; 12] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100];
const TOTALS: [u64; 12] = [0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228];
/// How long `Waiters::confirmed` watches for waiters trying again (quick mode: 1 ms sleeps).
const CONFIRM: Duration = Duration::from_millis(5);

/// A namespace's connections in SQLite's busy wait.
#[derive(Debug)]
pub struct Waiters {
    sleeping: AtomicU64,
    quick: AtomicBool,
    epoch: Instant,
    /// Each open connection's last sleep in the handler (µs since `epoch`; 0: never);
    /// a closed connection's entry is dropped at the next connection's install.
    entries: Mutex<Vec<Weak<AtomicU64>>>,
}

impl Default for Waiters {
    fn default() -> Self {
        Waiters {
            sleeping: AtomicU64::new(0),
            quick: AtomicBool::new(false),
            epoch: Instant::now(),
            entries: Mutex::default(),
        }
    }
}

impl Waiters {
    /// How many of the namespace's connections wait on a lock now.
    pub fn now(&self) -> u64 {
        self.sleeping.load(Ordering::SeqCst)
    }

    /// How many connections still wait, each proven by trying the lock again, and failing,
    /// after this call began: a waiter whose lock was released just before may still be
    /// asleep in here, but it does not come back in. Waits `CONFIRM` (quick mode: several
    /// tries of every waiter).
    pub async fn confirmed(&self) -> u64 {
        let since = self.micros();
        tokio::time::sleep(CONFIRM).await;
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.iter().filter_map(Weak::upgrade).filter(|e| e.load(Ordering::SeqCst) > since).count() as u64
    }

    /// Sleeps of 1 ms from now on (the explorer: a released waiter goes on at once).
    pub fn set_quick(&self) {
        self.quick.store(true, Ordering::SeqCst);
    }

    fn micros(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64 + 1
    }

    /// The sleep before try `count` (0-based) of one wait that began `waited_ms` ago, None
    /// once `timeout_ms` is spent: SQLite's schedule counts its nominal sleeps, as its own
    /// handler does; quick mode counts the time really waited (a loaded machine makes each
    /// 1 ms try longer, and the bound must stay below the op timeout).
    fn sleep_before(&self, count: u64, waited_ms: u64, timeout_ms: u64) -> Option<u64> {
        let (delay, prior) = if self.quick.load(Ordering::Relaxed) {
            (1, waited_ms)
        } else if let Some(&d) = DELAYS.get(count as usize) {
            (d, TOTALS[count as usize])
        } else {
            let last = DELAYS.len() - 1;
            (DELAYS[last], TOTALS[last] + DELAYS[last] * (count - last as u64))
        };
        let delay = delay.min(timeout_ms.saturating_sub(prior));
        (delay > 0).then_some(delay)
    }
}

/// What one connection's handler reads: the namespace's count and the wait's bound.
struct Handler {
    waiters: Arc<Waiters>,
    timeout_ms: u64,
    /// This connection's slot in `Waiters::entries`.
    entry: Arc<AtomicU64>,
    /// When the current wait began (µs since the waiters' epoch).
    began: AtomicU64,
}

const KEY: &std::ffi::CStr = c"counterlab.busy";

/// Installs the counting busy handler on `db`, bounded by `timeout` per wait (as
/// `busy_timeout` was). The handler's state is freed when the connection closes.
///
/// # Safety
/// `db` must be an open connection that no other thread uses during the call.
pub unsafe fn install(
    db: NonNull<libsqlite3_sys::sqlite3>,
    waiters: Arc<Waiters>,
    timeout: Duration,
) -> Result<(), String> {
    use libsqlite3_sys as ffi;
    let entry = Arc::new(AtomicU64::new(0));
    {
        let mut entries = waiters.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.strong_count() > 0);
        entries.push(Arc::downgrade(&entry));
    }
    let timeout_ms = timeout.as_millis() as u64;
    let state = Box::into_raw(Box::new(Handler { waiters, timeout_ms, entry, began: AtomicU64::new(0) }));
    // SAFETY: `state` stays valid until SQLite calls `free` when `db` closes, after its
    // last busy callback; the key is a static C string.
    let rc = unsafe { ffi::sqlite3_set_clientdata(db.as_ptr(), KEY.as_ptr(), state.cast(), Some(free)) };
    if rc != ffi::SQLITE_OK {
        // SAFETY: SQLite did not take it.
        drop(unsafe { Box::from_raw(state) });
        return Err(format!("sqlite3_set_clientdata returned {rc}"));
    }
    // SAFETY: as above; replaces the handler `busy_timeout` installed.
    let rc = unsafe { ffi::sqlite3_busy_handler(db.as_ptr(), Some(on_busy), state.cast()) };
    if rc != ffi::SQLITE_OK {
        return Err(format!("sqlite3_busy_handler returned {rc}"));
    }
    Ok(())
}

unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: `p` is the `Box<Handler>` `install` gave SQLite, freed once, at close.
    drop(unsafe { Box::from_raw(p.cast::<Handler>()) });
}

unsafe extern "C" fn on_busy(p: *mut c_void, count: c_int) -> c_int {
    // SAFETY: `p` is the connection's live `Handler` (freed only at close).
    let h = unsafe { &*p.cast::<Handler>() };
    let now = h.waiters.micros();
    if count <= 0 {
        h.began.store(now, Ordering::Relaxed);
    }
    let waited_ms = now.saturating_sub(h.began.load(Ordering::Relaxed)) / 1000;
    let Some(ms) = h.waiters.sleep_before(count.max(0) as u64, waited_ms, h.timeout_ms) else { return 0 };
    // Only a call that will sleep and try again is a waiter (the one that gives up is not).
    h.entry.store(now, Ordering::SeqCst);
    h.waiters.sleeping.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(ms));
    h.waiters.sleeping.fetch_sub(1, Ordering::SeqCst);
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sleeps add up to the timeout and follow SQLite's schedule.
    #[test]
    fn the_default_sleeps_follow_sqlite_and_stop_at_the_timeout() {
        let w = Waiters::default();
        let sleeps: Vec<u64> = (0..).map_while(|c| w.sleep_before(c, 0, 1000)).collect();
        assert_eq!(&sleeps[..12], &DELAYS);
        assert_eq!(sleeps.iter().sum::<u64>(), 1000);
        assert_eq!(sleeps.last(), Some(&72), "the last sleep is cut to the timeout");
        w.set_quick();
        // Quick mode: bounded by the time really waited, whatever the count.
        assert_eq!(w.sleep_before(0, 0, 40), Some(1));
        assert_eq!(w.sleep_before(5, 39, 40), Some(1));
        assert_eq!(w.sleep_before(5, 40, 40), None);
    }
}
