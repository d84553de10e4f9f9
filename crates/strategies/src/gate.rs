//! The step gate: every call through which a strategy reaches a server (SQL BEGIN,
//! statements and COMMIT; Redis commands, scripts and pipelines; the broker designs'
//! publish, get, ack and a crashed consumer's channel close) passes `step`. Outside
//! an explorer's session it is one task-local lookup and the call runs as it would; in a
//! session (`scope`) the call first tells the scheduler what it is about to send, waits
//! for its permission, then reports what it saw, so `counterlab explore` decides the
//! order of the sessions' steps while the server still decides locks and snapshots.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

/// What a session tells the scheduler.
#[derive(Debug)]
pub enum GateEvent {
    /// Session `session` is about to send `step` (SQL with its arguments spliced in, a
    /// Redis command or a broker call); it waits until `grant` is answered (or dropped:
    /// run it anyway). `independent`: the design declares that the step commutes with
    /// every other session's steps (`independent`), so no order of it against them can
    /// change what any session sees.
    Ready { session: usize, step: String, grant: oneshot::Sender<()>, independent: bool },
    /// Its step came back: what it returned, or the error.
    Done { session: usize, shown: String },
    /// The session's work ended (sent by the explorer's session itself, on the same
    /// channel, so it always arrives after the session's last `Done`).
    Ended { session: usize },
}

/// One session's line to the scheduler.
#[derive(Clone, Debug)]
pub struct Gate {
    pub session: usize,
    pub tx: mpsc::UnboundedSender<GateEvent>,
}

tokio::task_local! {
    static GATE: Gate;
    static INDEPENDENT: ();
}

/// Runs `f` (one session's ops) with its steps gated by `gate`'s scheduler.
pub async fn scope<F: Future>(gate: Gate, f: F) -> F::Output {
    GATE.scope(gate, f).await
}

/// Runs `f` with its steps declared independent of every other session's: the design
/// states that nothing another session of the explorer runs reads or writes what they
/// touch (a broker consumer's apply to a counter row and a message record no op touches,
/// and its ack), so the explorer may run them next to the session's following step with
/// no choice in between (`GateEvent::Ready::independent`). Outside a session, just `f`.
pub async fn independent<F: Future>(f: F) -> F::Output {
    INDEPENDENT.scope((), f).await
}

/// Whether the calling task runs in an explorer's session.
pub fn gated() -> bool {
    GATE.try_with(|_| ()).is_ok()
}

/// Runs `call`, first asking the scheduler's permission when in a session: `label`
/// says what is sent, `show` what came back. Outside a session, just `call`: the
/// returned future is `call` itself and a tag, so an op's future does not carry the
/// call twice (it did, 15.8 KB for a BEGIN, copied into the op's box on every op); in a
/// session the gated step is boxed.
pub fn step<'a, T: 'a, E: std::fmt::Display + 'a>(
    label: impl FnOnce() -> String + Send + 'a,
    show: impl FnOnce(&T) -> String + Send + 'a,
    call: impl Future<Output = Result<T, E>> + Send + 'a,
) -> impl Future<Output = Result<T, E>> + Send + 'a {
    use futures_util::future::Either;
    match GATE.try_with(Gate::clone) {
        Err(_) => Either::Left(call),
        Ok(gate) => Either::Right(Box::pin(gated_step(gate, label, show, call))),
    }
}

async fn gated_step<T, E: std::fmt::Display>(
    gate: Gate,
    label: impl FnOnce() -> String,
    show: impl FnOnce(&T) -> String,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let (grant, granted) = oneshot::channel();
    // A scheduler that is gone (dropped the receiver) lets every step run.
    let independent = INDEPENDENT.try_with(|_| ()).is_ok();
    let ready = GateEvent::Ready { session: gate.session, step: label(), grant, independent };
    if gate.tx.send(ready).is_ok() {
        let _ = granted.await;
    }
    let r = call.await;
    let shown = match &r {
        Ok(v) => show(v),
        Err(e) => format!("error: {e}"),
    };
    let _ = gate.tx.send(GateEvent::Done { session: gate.session, shown });
    r
}

/// `sql` as a reader would type it: each `$N` or `?` placeholder replaced by its
/// argument (integers only, so the text is safe to replay), whitespace folded.
pub fn spliced(sql: &str, args: &[i64]) -> String {
    let mut out = String::with_capacity(sql.len() + 8 * args.len());
    let mut next = 0usize;
    let mut chars = sql.trim().trim_end_matches(';').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                let mut n = 0usize;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d as usize;
                    chars.next();
                }
                push_arg(&mut out, args, n.wrapping_sub(1));
            }
            '?' => {
                push_arg(&mut out, args, next);
                next += 1;
            }
            c if c.is_whitespace() => {
                if !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn push_arg(out: &mut String, args: &[i64], i: usize) {
    match args.get(i) {
        Some(a) => out.push_str(&a.to_string()),
        None => out.push_str("NULL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_their_arguments() {
        assert_eq!(
            spliced("UPDATE t SET a = a - $1\n  WHERE id = $2;", &[3, 7]),
            "UPDATE t SET a = a - 3 WHERE id = 7"
        );
        assert_eq!(
            spliced("SELECT x FROM t WHERE id = ? AND u = ?", &[5, 1]),
            "SELECT x FROM t WHERE id = 5 AND u = 1"
        );
    }

    #[tokio::test]
    async fn outside_a_session_a_step_just_runs() {
        let r: Result<i32, String> =
            step(|| unreachable!("no label is made"), |_| unreachable!(), async { Ok(4) }).await;
        assert_eq!(r, Ok(4));
        assert!(!gated());
    }

    #[tokio::test]
    async fn in_a_session_a_step_waits_for_its_grant_and_reports() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let session = tokio::spawn(scope(Gate { session: 1, tx }, async {
            step(|| "BEGIN".to_string(), |v: &i32| format!("-> {v}"), async { Ok::<_, String>(9) }).await
        }));
        let Some(GateEvent::Ready { session: 1, step, grant, independent: false }) = rx.recv().await else {
            panic!("no ready")
        };
        assert_eq!(step, "BEGIN");
        grant.send(()).unwrap();
        let Some(GateEvent::Done { session: 1, shown }) = rx.recv().await else { panic!("no done") };
        assert_eq!(shown, "-> 9");
        assert_eq!(session.await.unwrap(), Ok(9));
    }

    #[tokio::test]
    async fn a_step_declared_independent_says_so() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let session = tokio::spawn(scope(Gate { session: 0, tx }, async {
            independent(step(|| "ack".to_string(), |_: &()| "ok".into(), async { Ok::<_, String>(()) })).await
        }));
        let Some(GateEvent::Ready { independent: true, grant, .. }) = rx.recv().await else {
            panic!("not independent")
        };
        grant.send(()).unwrap();
        assert_eq!(session.await.unwrap(), Ok(()));
    }
}
