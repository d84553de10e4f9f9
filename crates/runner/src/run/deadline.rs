//! The time bounds of a cell's phases around the load (setup, settle, the check's
//! counters and truth, the settled reads), derived from the scenario: a phase over its
//! bound ends there, and the row is INCOMPLETE naming the phase (docs/lifecycle.md).

use std::future::Future;
use std::time::Duration;

use counterlab_core::{ErrorClass, OpError, Outcome};

/// What every bounded phase gets whatever the scenario (a loaded CI machine included).
pub const PHASE_FLOOR: Duration = Duration::from_secs(10);
/// Op timeouts every phase gets on top of the floor.
pub const PHASE_OPS: u32 = 10;
/// Per seeded notification, for the phases that write or read every row (setup, the
/// check): 20 µs, 50 000 rows a second, several times what the backends take here.
pub const PER_ROW: Duration = Duration::from_micros(20);
/// Per user, for the phases that touch every user (a strategy's own seed, the counters).
pub const PER_USER: Duration = Duration::from_micros(200);

/// Each phase's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseBounds {
    /// Seeding the namespace, building the strategy and seeding its own state.
    pub setup: Duration,
    /// One settle attempt: the scenario's `settle_timeout_ms` plus one op timeout.
    pub settle: Duration,
    /// Reading the counters and the truth.
    pub check: Duration,
    /// The settled reads (each read also bounded by the op timeout).
    pub settled_reads: Duration,
}

impl PhaseBounds {
    /// The bounds for a scenario with this op timeout, seed and settle timeout.
    pub fn of(op: Duration, users: u64, rows: u64, settle: Duration) -> PhaseBounds {
        let fixed = PHASE_FLOOR + op * PHASE_OPS;
        let scaled = fixed.saturating_add(times(PER_ROW, rows)).saturating_add(times(PER_USER, users));
        PhaseBounds { setup: scaled, settle: settle.saturating_add(op), check: scaled, settled_reads: fixed }
    }
}

/// `d` times `n`, saturating.
fn times(d: Duration, n: u64) -> Duration {
    Duration::from_micros((d.as_micros() as u64).saturating_mul(n))
}

/// What a phase over its bound says: the phase and the bound.
pub fn over(phase: &str, bound: Duration) -> String {
    format!("{phase}: over its bound of {:.1} s", bound.as_secs_f64())
}

/// `fut`, or the phase named over its bound.
pub async fn within<T>(
    phase: &str,
    bound: Duration,
    fut: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(bound, fut).await.unwrap_or_else(|_| Err(over(phase, bound)))
}

/// One strategy call bounded like an op: no reply in time is a timeout (the call is
/// dropped; the server's own bound ends what it started).
pub async fn op_bounded<T>(bound: Duration, fut: impl Future<Output = Result<T, OpError>>) -> Result<T, OpError> {
    tokio::time::timeout(bound, fut).await.unwrap_or_else(|_| {
        Err(OpError::new(ErrorClass::Timeout, Outcome::Unknown, format!("no reply within {} ms", bound.as_millis())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_grow_with_the_op_timeout_and_the_seed() {
        let b = PhaseBounds::of(Duration::from_secs(5), 1_000, 10_000, Duration::from_secs(30));
        // 10 s + 10 x 5 s, + 10 000 x 20 µs + 1 000 x 200 µs.
        assert_eq!(b.setup, Duration::from_millis(60_400));
        assert_eq!(b.check, b.setup);
        assert_eq!(b.settle, Duration::from_secs(35));
        assert_eq!(b.settled_reads, Duration::from_secs(60));
        let big = PhaseBounds::of(Duration::from_secs(5), 1_000_000, 10_000_000, Duration::from_secs(30));
        assert_eq!(big.setup, Duration::from_secs(60 + 200 + 200));
        let huge = PhaseBounds::of(Duration::from_secs(5), u64::MAX, u64::MAX, Duration::MAX);
        assert!(huge.setup >= big.setup && huge.settle == Duration::MAX);
    }

    #[tokio::test]
    async fn a_phase_over_its_bound_names_the_phase() {
        let never = std::future::pending::<Result<i64, String>>();
        assert_eq!(
            within("setup", Duration::from_millis(200), never).await,
            Err("setup: over its bound of 0.2 s".into())
        );
        assert_eq!(within("setup", Duration::from_secs(2), async { Ok::<_, String>(7) }).await, Ok(7));
        let e = op_bounded(Duration::from_millis(5), std::future::pending::<Result<(), OpError>>()).await.unwrap_err();
        assert_eq!((e.class, e.outcome), (ErrorClass::Timeout, Outcome::Unknown));
    }
}
