//! A closed-loop worker's own connection, held for the run in a task-local slot as
//! pgbench holds one per client: an op neither waits on the pool nor pays the ping sqlx
//! 0.9 sends whenever a connection goes back to it (`return_to_pool`, unconditional).
//! Outside a worker's scope (open loop, samplers, the check) every lease is the pool's.

use std::cell::RefCell;
use std::future::Future;

use sqlx::MySql;
use sqlx::Postgres;
use sqlx::Sqlite;
use sqlx::pool::PoolConnection;

/// One pooled connection, whichever the driver.
pub(crate) enum Conn {
    Pg(PoolConnection<Postgres>),
    My(PoolConnection<MySql>),
    Lite(PoolConnection<Sqlite>),
}

/// The worker's slot: nothing yet, its connection lent to the op in flight (keyed by the
/// pool it came from), or its connection waiting for the next op.
enum Slot {
    Empty,
    Lent,
    Held(usize, Conn),
}

tokio::task_local! {
    static SLOT: RefCell<Slot>;
    /// Set in an explorer's session: a connection left with a rollback queued stays the
    /// session's, so that rollback goes out as the session's next step, not from the
    /// pool at a moment the schedule does not choose.
    static KEEP_UNCLEAN: ();
}

/// Runs `f` (a worker's op loop) with a slot of its own; the held connection goes back
/// to the pool when `f` ends.
pub async fn hold<F: Future>(f: F) -> F::Output {
    SLOT.scope(RefCell::new(Slot::Empty), f).await
}

/// `hold` for an explorer's session: its one connection is kept whatever an op left
/// on it (a rollback queued by a failed transaction goes out with its next step).
pub async fn hold_session<F: Future>(f: F) -> F::Output {
    KEEP_UNCLEAN.scope((), hold(f)).await
}

/// Whether the calling task runs inside a worker's scope (`hold`): its ops' SQL then
/// uses the worker's own connection.
pub fn holding() -> bool {
    SLOT.try_with(|_| ()).is_ok()
}

/// What the slot gives an op on pool `key`: its held connection, a claim to fill it (the
/// slot was empty), or nothing (no slot, another pool's, or lent to a concurrent call of
/// the same op: a `mark_read_dup` group's other calls use the pool).
pub(crate) enum Take {
    Held(Conn),
    Claim,
    Pool,
}

pub(crate) fn take(key: usize) -> Take {
    SLOT.try_with(|s| {
        let mut s = s.borrow_mut();
        match &*s {
            Slot::Empty => {
                *s = Slot::Lent;
                Take::Claim
            }
            Slot::Held(k, _) if *k == key => match std::mem::replace(&mut *s, Slot::Lent) {
                Slot::Held(_, c) => Take::Held(c),
                _ => unreachable!("matched Held above"),
            },
            _ => Take::Pool,
        }
    })
    .unwrap_or(Take::Pool)
}

/// A connection lent to one op: the worker's own, back to its slot when the op ended
/// cleanly, or the pool's (dropping it returns it there, ping included).
pub(crate) struct Lease {
    conn: Option<Conn>,
    /// The pool key when this is the worker's own connection.
    held: Option<usize>,
    /// Set once the op's last exchange completed and left no transaction open. A lease
    /// dropped unclean (an error, or a timeout that cut a query off mid-reply) gives
    /// its connection to the pool, whose release ping drains or discards it.
    pub(crate) clean: bool,
}

impl Lease {
    pub(crate) fn pooled(conn: Conn) -> Lease {
        Lease { conn: Some(conn), held: None, clean: false }
    }

    /// A claim on the slot for pool `key`, filled by `fill` (dropped unfilled, say by
    /// a timeout while the pool is acquired from, it leaves the slot empty again).
    pub(crate) fn claim(key: usize) -> Lease {
        Lease { conn: None, held: Some(key), clean: false }
    }

    pub(crate) fn held(key: usize, conn: Conn) -> Lease {
        Lease { conn: Some(conn), held: Some(key), clean: false }
    }

    pub(crate) fn fill(&mut self, conn: Conn) {
        self.conn = Some(conn);
    }

    pub(crate) fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(key) = self.held else { return };
        let conn = self.conn.take();
        let clean = self.clean || KEEP_UNCLEAN.try_with(|_| ()).is_ok();
        let _ = SLOT.try_with(move |s| {
            let back = match conn {
                Some(c) if clean => Slot::Held(key, c),
                _ => Slot::Empty,
            };
            // An unclean connection, if any, drops here: back to the pool.
            *s.borrow_mut() = back;
        });
    }
}
