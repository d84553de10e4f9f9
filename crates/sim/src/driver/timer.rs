//! A sleep precise to microseconds inside the async runtime, for the open-loop pacer:
//! tokio's own timer wheel ticks in whole milliseconds, which would be the schedule's
//! error. On Linux a timerfd registered with the runtime's reactor wakes the task when it
//! expires (as pgbench's `ppoll` timeout does), so an intended start costs no thread hop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A sleep is cut into slices of at most this, so a cancel is seen within it.
const SLICE: Duration = Duration::from_millis(50);

/// A one-shot timer owned by one task.
pub(super) struct Timer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl Timer {
    /// A timerfd on the current runtime; where none can be had (not Linux, out of file
    /// descriptors), the runtime's millisecond timer.
    pub(super) fn new() -> Timer {
        #[cfg(target_os = "linux")]
        {
            use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
            let flags = TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC;
            let fd = timerfd_create(TimerfdClockId::Monotonic, flags).ok();
            // SAFETY: the OwnedFd is a valid open descriptor that the AsyncFd owns and
            // never replaces: it stays the same file until the AsyncFd is dropped.
            let fd = fd.and_then(|fd| unsafe { tokio::io::unix::AsyncFd::register(fd) }.ok());
            Timer { fd }
        }
        #[cfg(not(target_os = "linux"))]
        Timer {}
    }

    /// Whether sleeps are precise (a timerfd) rather than on the runtime's 1 ms ticks.
    #[cfg(test)]
    pub(super) fn is_precise(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.fd.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Sleeps until `t` (never returns before it). False when `cancel` was set first.
    pub(super) async fn sleep_until(&mut self, t: Instant, cancel: &AtomicBool) -> bool {
        loop {
            let now = Instant::now();
            if now >= t {
                return true;
            }
            if cancel.load(Ordering::Relaxed) {
                return false;
            }
            self.sleep((t - now).min(SLICE)).await;
        }
    }

    /// Sleeps about `d` (the caller checks the clock).
    async fn sleep(&mut self, d: Duration) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd
            && wait_timerfd(fd, d).await
        {
            return;
        }
        tokio::time::sleep(d).await;
    }
}

/// Arms the timerfd `d` ahead and waits for it to expire; false if it could not be armed.
#[cfg(target_os = "linux")]
async fn wait_timerfd(fd: &tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>, d: Duration) -> bool {
    use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec, timerfd_settime};
    let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
    // A zero value would disarm the timer: at least 1 ns.
    let value = Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos().max(1) as _ };
    let spec = Itimerspec { it_interval: zero, it_value: value };
    if timerfd_settime(fd.get_ref(), TimerfdTimerFlags::empty(), &spec).is_err() {
        return false;
    }
    // Bounded: a one-shot timer that was just armed expires once; a spurious wake-up
    // (read finds nothing) clears the readiness and waits again, at most a few times.
    for _ in 0..4 {
        let Ok(mut guard) = fd.readable().await else { return false };
        let mut ticks = [0u8; 8];
        match rustix::io::read(fd.get_ref(), &mut ticks) {
            Ok(_) => {
                // Drained: the fd is not readable until it is armed and expires again.
                guard.clear_ready();
                return true;
            }
            Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_timer_never_wakes_before_its_time_and_sees_a_cancel() {
        let mut timer = Timer::new();
        #[cfg(target_os = "linux")]
        assert!(timer.is_precise(), "a timerfd on Linux");
        let cancel = AtomicBool::new(false);
        for us in [0u64, 1, 50, 300, 2_000] {
            let t = Instant::now() + Duration::from_micros(us);
            assert!(timer.sleep_until(t, &cancel).await);
            assert!(Instant::now() >= t, "woke before {us} us");
        }
        cancel.store(true, Ordering::Relaxed);
        assert!(!timer.sleep_until(Instant::now() + Duration::from_secs(3600), &cancel).await);
    }
}
