//! The history's tests: read checks of hand-made and generated linearizable histories,
//! and the anomalies `classify` names for planted faults.

use proptest::prelude::*;

use super::*;
use crate::check::CheckInput;
use crate::model::Guarantee;
use crate::seed::SeedSpec;

fn ev(op: OpKind, user: UserId, id: i64, t: (u64, u64), outcome: Outcome, observed: i64) -> Event {
    Event {
        worker: 0,
        op,
        user,
        id,
        invoke_us: t.0,
        complete_us: t.1,
        outcome,
        observed,
        attempts: 1,
        unknown_attempts: 0,
    }
}
use OpKind::*;
use Outcome::{Fail, Ok as Okay, Unknown};

#[test]
fn a_valid_history_has_no_read_violations() {
    let h = [
        ev(Create, 1, 10, (0, 10), Okay, 1),
        ev(ReadCount, 1, 0, (11, 12), Okay, 4),
        ev(MarkRead, 1, 10, (13, 20), Okay, 1),
        // Overlapping the mark_read: either value.
        ev(ReadCount, 1, 0, (14, 15), Okay, 4),
        ev(ReadCount, 1, 0, (16, 25), Okay, 3),
        ev(MarkAllRead, 1, 0, (30, 40), Okay, 3),
        ev(ReadCount, 1, 0, (41, 42), Okay, 0),
    ];
    let r = check_reads(&h, &|_| 3);
    assert_eq!((r.reads_checked, r.violations_total), (4, 0), "{r:?}");
}

#[test]
fn a_planted_read_violation_is_found_with_its_bounds() {
    let h = [
        ev(Create, 1, 10, (0, 10), Okay, 1),
        ev(MarkRead, 1, 10, (13, 20), Okay, 1),
        // After both completed, the count must be 3 again: 2 is a lost increment seen.
        ev(ReadCount, 1, 0, (21, 22), Okay, 2),
    ];
    let r = check_reads(&h, &|_| 3);
    assert_eq!(r.violations_total, 1);
    assert_eq!((r.violations[0].lo, r.violations[0].hi), (3, 3));
}

#[test]
fn a_replica_read_is_measured_as_stale_within_its_bound_and_named_stale_read_beyond_it() {
    let h = [
        ev(Create, 1, 10, (0, 1_000), Okay, 1),
        ev(Create, 1, 11, (5_000, 6_000), Okay, 1),
        // 3 is the count before the first create completed: 9 ms back, 2 counts off.
        ev(ReadCount, 1, 0, (10_000, 10_500), Okay, 3),
        // 4: the count between the creates, 4 ms back, 1 off.
        ev(ReadCount, 1, 0, (10_000, 10_600), Okay, 4),
        // Fresh.
        ev(ReadCount, 1, 0, (10_000, 10_700), Okay, 5),
        // A value the counter never had: not stale, wrong.
        ev(ReadCount, 1, 0, (11_000, 11_500), Okay, 9),
    ];
    let within = check_reads_from(&h, &|_| 3, ReadSource::Replica { bound_us: Some(5_000) });
    assert_eq!((within.reads_checked, within.violations_total, within.stale_total), (4, 3, 2));
    assert_eq!(within.stale_over_bound, 1, "9 ms is over the 5 ms bound, 4 ms is not");
    let st = within.staleness().expect("replica reads have a staleness");
    assert_eq!((st.stale_reads, st.over_bound, st.max_us, st.max_counts), (2, 1, 9_000, 2), "{st:?}");
    assert_eq!((st.p50_us, st.p99_us), (4_000, 9_000));
    assert_eq!(st.buckets.iter().map(|b| b.1).sum::<u64>(), 2, "{:?}", st.buckets);
    assert_eq!(st.buckets[1], (5_000, 1));
    assert_eq!(st.buckets[2], (10_000, 1));
    let a = classify(&h, &[row(1, 5, 5)], Some(&within), &[], Context { guarantee: Guarantee::Eventual, ..cx() });
    let names: Vec<(&str, u64)> = a.iter().map(|a| (a.name, a.count)).collect();
    assert_eq!(names, [("read_out_of_bounds", 1), ("stale_read", 1)], "judged even for an eventual strategy");
    assert!(a[1].witnesses[0].note.contains("9.0 ms before the read began (2 off)"), "{:?}", a[1].witnesses[0]);
    // No bound: every stale read is an anomaly.
    let strict = check_reads_from(&h, &|_| 3, ReadSource::Replica { bound_us: None });
    assert_eq!(strict.stale_over_bound, 2);
    // From the counter itself the same reads are plain violations, with no staleness.
    assert_eq!(check_reads(&h, &|_| 3).staleness(), None);
}

#[test]
fn a_cached_read_may_lag_by_design_and_a_staler_one_is_named_with_how_far_back_it_fits() {
    let h = [
        ev(Create, 1, 10, (0, 1_000), Okay, 1),
        ev(Create, 1, 11, (5_000, 6_000), Okay, 1),
        // 3 (the seed) + 2 is the count from 6 ms on; this read shows 3, the count before
        // the first create completed: 9 ms stale at its start.
        ev(ReadCount, 1, 0, (10_000, 10_500), Okay, 3),
        // A value the counter never had.
        ev(ReadCount, 1, 0, (11_000, 11_500), Okay, 9),
    ];
    let exact = check_reads(&h, &|_| 3);
    assert_eq!((exact.violations_total, exact.stale_total, exact.violations[0].stale_for_us), (2, 0, None));
    let within = check_reads_lagging(&h, &|_| 3, Some(9_500));
    assert_eq!((within.violations_total, within.stale_total), (1, 0), "{within:?}");
    let lagging = check_reads_lagging(&h, &|_| 3, Some(2_000));
    assert_eq!((lagging.violations_total, lagging.stale_total), (2, 1));
    assert_eq!(lagging.violations[0].stale_for_us, Some(9_000));
    assert_eq!(lagging.violations[1].stale_for_us, None);
    let a = classify(&h, &[row(1, 5, 5)], Some(&lagging), &[], cx());
    let names: Vec<(&str, u64)> = a.iter().map(|a| (a.name, a.count)).collect();
    assert_eq!(names, [("read_out_of_bounds", 1), ("stale_cache_read", 1)]);
    assert!(a[1].witnesses[0].note.contains("9.0 ms before"), "{:?}", a[1].witnesses[0]);
}

#[test]
fn over_claimed_transitions_leave_no_value_and_the_witness_says_so() {
    // One unread row, two mark_reads that each claimed it (a double decrement): the
    // replies say -1, the truth is 0, and no read can fit.
    let h = [
        ev(MarkRead, 1, 10, (0, 10), Okay, 1),
        ev(MarkRead, 1, 10, (1, 11), Okay, 1),
        ev(ReadCount, 1, 0, (20, 21), Okay, 0),
    ];
    let r = check_reads(&h, &|_| 1);
    assert_eq!((r.violations_total, r.violations[0].lo, r.violations[0].hi), (1, 0, -1));
    let a = classify(&h, &[], Some(&r), &[], cx());
    let w = &a.iter().find(|a| a.name == "read_out_of_bounds").expect("named").witnesses[0];
    assert!(w.note.contains("fell to -1: no value fits"), "{}", w.note);
}

#[test]
fn a_read_short_by_a_create_still_in_flight_names_that_create_not_a_finished_one() {
    // Two unread rows. Long before: create 20 raced mark_all_read (a zeroing-race pair,
    // finished). Then create 21 (100..200) commits its row, mark_all_read (120..130)
    // marks it read and counts it down, and a read at 140 sees -1: create 21's +1 has not
    // landed. The witness is create 21, in flight at the read.
    let h = [
        ev(Create, 1, 20, (0, 10), Okay, 1),
        ev(MarkAllRead, 1, 0, (5, 15), Okay, 2),
        ev(Create, 1, 21, (100, 200), Okay, 1),
        ev(MarkAllRead, 1, 0, (120, 130), Okay, 1),
        ev(ReadCount, 1, 0, (140, 141), Okay, -1),
    ];
    let r = check_reads(&h, &|_| 2);
    assert_eq!(r.violations_total, 1, "{r:?}");
    let a = classify(&h, &[], Some(&r), &[], cx());
    let late = a.iter().find(|a| a.name == "late_increment_visible").unwrap_or_else(|| panic!("{a:?}"));
    let w = &late.witnesses[0];
    assert_eq!(w.id, 21, "{w:?}");
    assert_eq!(w.ops.iter().map(|e| e.op).collect::<Vec<_>>(), vec![Create, MarkAllRead, ReadCount]);
    assert!(a.iter().all(|a| a.name != "lost_increment"), "no borrowed pair: {a:?}");
    // Two short with one create in flight: the late increment explains one, not both.
    let mut h3 = h;
    h3[4].observed = -2;
    let r3 = check_reads(&h3, &|_| 2);
    let a3 = classify(&h3, &[], Some(&r3), &[], cx());
    assert!(a3.iter().all(|a| a.name != "late_increment_visible"), "{a3:?}");
    // Create 21 finished before the read began: it was not in flight, so not this name.
    let mut h2 = h;
    h2[2].complete_us = 135;
    let r2 = check_reads(&h2, &|_| 2);
    let a2 = classify(&h2, &[], Some(&r2), &[], cx());
    assert!(a2.iter().all(|a| a.name != "late_increment_visible"), "{a2:?}");
}

#[test]
fn two_deletes_that_both_reply_removed_do_not_pin_the_row_to_two_decrements() {
    // redis-set's deletes: one takes the id from the set, the other deletes the row; both
    // reply 1. The count fell by one; a read showing that is within the bounds.
    let h = [
        ev(Create, 1, 30, (0, 10), Okay, 1),
        ev(Delete, 1, 30, (20, 40), Okay, 1),
        ev(Delete, 1, 30, (21, 39), Okay, 1),
        ev(ReadCount, 1, 0, (50, 51), Okay, 2),
    ];
    assert_eq!(check_reads(&h, &|_| 2).violations_total, 0);
}

#[test]
fn unknown_ops_widen_every_later_read_and_fails_do_not() {
    let h = [
        ev(Create, 1, 0, (0, 10), Unknown, 0),
        ev(Delete, 1, 5, (0, 10), Fail, 0),
        ev(ReadCount, 1, 0, (100, 101), Okay, 1),
        ev(ReadCount, 1, 0, (100, 101), Okay, 0),
    ];
    let r = check_reads(&h, &|_| 0);
    assert_eq!(r.violations_total, 0);
    let h = [ev(Delete, 1, 5, (0, 10), Fail, 0), ev(ReadCount, 1, 0, (100, 101), Okay, 1)];
    assert_eq!(check_reads(&h, &|_| 2).violations_total, 1);
    // A mark_all_read with an unknown outcome may have cleared everything.
    let h = [ev(MarkAllRead, 1, 0, (0, 10), Unknown, 0), ev(ReadCount, 1, 0, (100, 101), Okay, 0)];
    assert_eq!(check_reads(&h, &|_| 9).violations_total, 0);
}

#[test]
fn ties_in_microseconds_count_as_overlapping() {
    // A create and a read within the same microsecond: either value is allowed.
    for seen in [3, 4] {
        let h = [ev(Create, 1, 9, (5, 5), Okay, 1), ev(ReadCount, 1, 0, (5, 5), Okay, seen)];
        assert_eq!(check_reads(&h, &|_| 3).violations_total, 0, "{seen}");
    }
}

#[test]
fn a_run_whose_mark_all_read_left_a_counter_too_high_names_the_stale_count_not_zeroing() {
    // User 2: a create raced a mark_all_read and the counter is one too low, which both
    // a zeroing and a stale-count mark_all_read can do.
    let low = [
        ev(MarkAllRead, 2, 0, (2, 8), Okay, 2),
        ev(Create, 2, 40, (3, 5), Okay, 1),
        ev(MarkAllRead, 2, 0, (4, 9), Okay, 1),
    ];
    let a = classify(&low, &[row(2, 0, 1)], None, &[], cx());
    assert_eq!(a[0].name, "lost_increment");
    // User 1 in the same run: too high at a mark_all_read's overlap, which zeroing cannot do.
    let mut h = vec![ev(MarkAllRead, 1, 0, (2, 8), Okay, 3), ev(Create, 1, 30, (3, 5), Okay, 1)];
    h.extend(low);
    let a = classify(&h, &[row(1, 1, 0), row(2, 0, 1)], None, &[], cx());
    assert_eq!((a.len(), a[0].name, a[0].count), (1, "stale_mark_all_read", 2), "{a:?}");
    assert!(a[0].witnesses.iter().any(|w| w.user == 2 && w.note.contains("zeroing cannot")));
}

#[test]
fn the_zeroing_race_is_found_among_many_creates_and_a_delete_race_is_preferred() {
    let h = [
        ev(Create, 1, 8, (0, 1), Okay, 1),
        ev(MarkAllRead, 1, 0, (5, 10), Okay, 2),
        ev(Create, 1, 9, (2, 20), Okay, 1),
        ev(Create, 1, 10, (30, 40), Okay, 1),
    ];
    let a = classify(&h, &[row(1, 1, 2)], None, &[], cx());
    assert_eq!(a[0].name, "lost_increment");
    assert_eq!(a[0].witnesses[0].id, 9);
    let h = [
        ev(MarkRead, 1, 7, (0, 10), Okay, 1),
        ev(MarkRead, 1, 7, (20, 30), Okay, 1),
        ev(MarkRead, 1, 8, (0, 10), Okay, 1),
        ev(Delete, 1, 8, (5, 12), Okay, 1),
    ];
    let a = classify(&h, &[row(1, 0, 2)], None, &[], cx());
    assert_eq!(a[0].name, "double_decrement");
    let ops: Vec<OpKind> = a[0].witnesses[0].ops.iter().map(|e| e.op).collect();
    assert_eq!((a[0].witnesses[0].id, ops), (8, vec![MarkRead, Delete]));
}

fn row(user: UserId, counter: i64, truth: i64) -> CheckInput {
    CheckInput { user, counter: Some(counter), truth }
}

fn cx() -> Context {
    Context {
        failover_us: None,
        guarantee: Guarantee::Exact,
        lost_flushes: 0,
        double_flushes: 0,
        double_applies: (0, 0),
        reconciler: false,
        seed: SeedSpec { n_users: 0, notifications_per_user: 4, initial_read_per_user: 1 },
    }
}

#[test]
fn two_transition_claims_on_one_row_are_a_double_decrement() {
    let h = [
        ev(MarkReadDup, 1, 7, (0, 10), Okay, 1),
        ev(MarkReadDup, 1, 7, (1, 9), Okay, 1),
        ev(Create, 2, 70, (0, 1), Okay, 1),
    ];
    let a = classify(&h, &[row(1, 2, 3), row(2, 1, 1)], None, &[], cx());
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].name, a[0].count, a[0].witnesses[0].id), ("double_decrement", 1, 7));
    assert_eq!(a[0].witnesses[0].ops.len(), 2);
    // Calls completed by the time the second claim completed: 2 (at 1 and 9) + it.
    assert_eq!(a[0].ops_to_detect, 3);
    // The same history with the counters right: nothing.
    assert!(classify(&h, &[row(1, 3, 3), row(2, 1, 1)], None, &[], cx()).is_empty());
}

#[test]
fn two_deletes_of_one_unread_row_that_both_lowered_the_counter_are_a_double_decrement() {
    let h = [ev(Delete, 1, 7, (0, 10), Okay, 1), ev(Delete, 1, 7, (2, 8), Okay, 1), ev(Create, 2, 70, (0, 1), Okay, 1)];
    let a = classify(&h, &[row(1, 1, 2), row(2, 1, 1)], None, &[], cx());
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].name, a[0].witnesses[0].id), ("double_decrement", 7));
    assert_eq!(a[0].witnesses[0].ops.len(), 2);
    assert!(a[0].witnesses[0].note.contains("two deletes"), "{:?}", a[0].witnesses[0].note);
    // One delete that removed the row: the same counter is explained otherwise, not by it.
    let one = classify(&h[1..], &[row(1, 1, 2), row(2, 1, 1)], None, &[], cx());
    assert_ne!(one[0].name, "double_decrement", "{one:?}");
}

#[test]
fn a_create_racing_mark_all_read_is_a_lost_increment_and_retries_are_named() {
    let h = [ev(MarkAllRead, 1, 0, (0, 10), Okay, 3), ev(Create, 1, 9, (2, 5), Okay, 1)];
    let a = classify(&h, &[row(1, 0, 1)], None, &[], cx());
    assert_eq!(a[0].name, "lost_increment");
    // The same race seen only by a later read, the final state healed by another
    // mark_all_read: still named, from the read that fell below its bounds.
    let h = [
        ev(MarkAllRead, 1, 0, (0, 10), Okay, 3),
        ev(Create, 1, 9, (2, 5), Okay, 1),
        ev(ReadCount, 1, 0, (20, 21), Okay, 0),
        ev(MarkAllRead, 1, 0, (30, 40), Okay, 1),
    ];
    let reads = check_reads(&h, &|_| 3);
    assert_eq!(reads.violations_total, 1);
    let a = classify(&h, &[row(1, 0, 0)], Some(&reads), &[], cx());
    let names: Vec<&str> = a.iter().map(|a| a.name).collect();
    assert_eq!(names, ["lost_increment", "read_out_of_bounds"]);
    assert_eq!(a[0].witnesses[0].ops.len(), 3);
    let mut retried = ev(Create, 1, 9, (2, 5), Okay, 1);
    retried.unknown_attempts = 1;
    let a = classify(&[retried], &[row(1, 2, 1)], None, &[], cx());
    assert_eq!(a[0].name, "double_apply_after_retry");
    let half = ev(MarkRead, 1, 9, (2, 5), Unknown, 0);
    let a = classify(&[half], &[row(1, 2, 1)], None, &[], cx());
    assert_eq!(a[0].name, "lost_decrement");
    // A flusher's own count of doubled claims names drift of either sign.
    let flushed = Context { guarantee: Guarantee::Eventual, double_flushes: 2, ..cx() };
    let a = classify(&[], &[row(1, 0, 1), row(2, 3, 2)], None, &[], flushed);
    assert_eq!((a[0].name, a[0].count), ("double_flush", 2));
    let lost = Context { lost_flushes: 1, ..flushed };
    let a = classify(&[], &[row(1, 0, 1), row(2, 3, 2)], None, &[], lost);
    let names: Vec<(&str, u64)> = a.iter().map(|a| (a.name, a.count)).collect();
    assert_eq!(names, [("lost_flush", 1), ("double_flush", 1)]);
    // A broker consumer's own count of messages it applied twice after redelivery.
    // A doubled +1 raised a counter: user 2 (too high) is charged, not user 1 (too low).
    let redelivered = Context { guarantee: Guarantee::Eventual, double_applies: (1, 0), ..cx() };
    let a = classify(&[], &[row(1, 0, 1), row(2, 3, 2)], None, &[], redelivered);
    let named: Vec<(&str, UserId)> = a.iter().map(|a| (a.name, a.witnesses[0].user)).collect();
    assert_eq!(named, [("double_apply_after_redelivery", 2), ("unexplained_drift", 1)]);
    // Two overlapping mark_reads of different rows, each claiming a transition, and a
    // counter one too high: one read-modify-write overwrote the other.
    let h = [ev(MarkRead, 1, 3, (2, 6), Okay, 1), ev(MarkRead, 1, 4, (4, 9), Okay, 1)];
    let a = classify(&h, &[row(1, 3, 2)], None, &[], cx());
    assert_eq!((a[0].name, a[0].witnesses[0].ops.len()), ("lost_update", 2));
    // One overlapping pair loses one delta at most: three too high is not its doing.
    let a = classify(&h, &[row(1, 5, 2)], None, &[], cx());
    assert_eq!(a[0].name, "unexplained_drift");
    // User 2's seeded ids are 5..=8, id 5 read: deleting it must not lower the counter.
    let a = classify(&[ev(Delete, 2, 5, (2, 3), Okay, 1)], &[row(2, 2, 3)], None, &[], cx());
    assert_eq!(a[0].name, "wrong_delete_adjustment");
    // Id 6 was unread until a mark_read completed before the delete began.
    let h = [ev(MarkRead, 2, 6, (1, 2), Okay, 1), ev(Delete, 2, 6, (3, 4), Okay, 1)];
    assert_eq!(classify(&h, &[row(2, 1, 2)], None, &[], cx())[0].name, "wrong_delete_adjustment");
    // Overlapping, the row may have been unread when deleted: not this anomaly.
    let h = [ev(MarkRead, 2, 6, (1, 4), Okay, 1), ev(Delete, 2, 6, (3, 5), Okay, 1)];
    assert_ne!(classify(&h, &[row(2, 1, 2)], None, &[], cx())[0].name, "wrong_delete_adjustment");
    // A create overlapping a mark_all_read that subtracted an earlier count: too high.
    let h = [ev(MarkAllRead, 1, 0, (2, 8), Okay, 3), ev(Create, 1, 30, (3, 5), Okay, 1)];
    assert_eq!(classify(&h, &[row(1, 1, 0)], None, &[], cx())[0].name, "stale_mark_all_read");
    // The same calls one after the other explain nothing.
    let h = [ev(MarkRead, 1, 3, (2, 3), Okay, 1), ev(MarkRead, 1, 4, (4, 9), Okay, 1)];
    assert_eq!(classify(&h, &[row(1, 3, 2)], None, &[], cx())[0].name, "unexplained_drift");
}

#[test]
fn settle_reads_and_negative_counters_are_named() {
    let s = [SettledRead { user: 1, shown: 4, truth: 3 }];
    let a = classify(&[], &[row(1, -1, 0)], None, &s, cx());
    let names: Vec<&str> = a.iter().map(|a| a.name).collect();
    assert_eq!(names, ["negative_counter", "stale_after_settle", "unexplained_drift"]);
    // A racy strategy's stale reads are not judged.
    let none = Context { guarantee: Guarantee::None, ..cx() };
    assert!(classify(&[], &[], None, &s, none).is_empty());
}

/// A linearizable single-user counter: ops applied at a random point inside their
/// interval; reads return the value at their point. No read may be flagged.
fn linear_history() -> impl proptest::strategy::Strategy<Value = (i64, Vec<Event>)> {
    (0i64..5, prop::collection::vec((0u8..5, 0u64..1000, 1u64..200, 0u64..1000, 0u8..10), 1..40)).prop_map(
        |(init, raw)| {
            // (kind, start, len, point fraction in permille, outcome selector)
            let mut ops: Vec<(u64, u8, u64, u64, u8)> =
                raw.into_iter().map(|(k, s, l, f, o)| (s + l * f / 1000, k, s, s + l, o)).collect();
            ops.sort();
            let mut value = init;
            let mut out = Vec::new();
            for (_, k, s, c, o) in ops {
                let unknown = o < 2;
                let applies = o != 1;
                let (op, obs) = match k {
                    0 => {
                        if applies {
                            value += 1
                        }
                        (Create, 1)
                    }
                    1 | 2 => {
                        let t = (value > 0 && applies) as i64;
                        value -= t;
                        (if k == 1 { MarkRead } else { Delete }, t)
                    }
                    3 => {
                        let n = if applies { value } else { 0 };
                        value -= n;
                        (MarkAllRead, n)
                    }
                    _ => (ReadCount, value),
                };
                let outcome = if unknown && op != ReadCount { Unknown } else { Okay };
                out.push(ev(op, 1, 1, (s, c), outcome, obs));
            }
            (init, out)
        },
    )
}

proptest! {
    #[test]
    fn linearizable_histories_pass_the_read_check((init, h) in linear_history()) {
        let r = check_reads(&h, &|_| init);
        prop_assert_eq!(r.violations_total, 0, "{:?}", r.violations);
    }

    #[test]
    fn a_read_below_what_the_history_allows_is_caught((init, mut h) in linear_history()) {
        // Only the ok writes, then a read after all of them: the count is at least
        // their summed certain effect, so one less is a violation and it is not.
        h.retain(|e| e.outcome == Okay && e.op != ReadCount);
        let least = h.iter().fold(init, |v, e| v + effect_range(e).0);
        prop_assume!(least >= 1);
        let mut wrong = ev(ReadCount, 1, 0, (5000, 5001), Okay, least - 1);
        let r = check_reads(&[h.clone(), vec![wrong]].concat(), &|_| init);
        prop_assert_eq!(r.violations_total, 1);
        wrong.observed = least;
        let r = check_reads(&[h, vec![wrong]].concat(), &|_| init);
        prop_assert_eq!(r.violations_total, 0);
    }
}

#[test]
fn a_replica_s_staleness_covers_every_stale_read_not_only_the_kept_ones() {
    // 10 050 reads, each showing the count from before the second create: stale by
    // 7 ms + 10 us per read. More than MAX_KEPT_VIOLATIONS, so most are only counted.
    let n: u64 = 10_050;
    let mut h = vec![ev(Create, 1, 10, (0, 1_000), Okay, 1), ev(Create, 1, 11, (2_000, 3_000), Okay, 1)];
    h.extend((0..n).map(|i| ev(ReadCount, 1, 0, (10_000 + 10 * i, 10_001 + 10 * i), Okay, 4)));
    let rc = check_reads_from(&h, &|_| 3, ReadSource::Replica { bound_us: Some(50_000) });
    assert_eq!((rc.stale_total, rc.violations.len()), (n, MAX_KEPT_VIOLATIONS));
    let st = rc.staleness().expect("a replica's staleness");
    assert_eq!(st.buckets.iter().map(|b| b.1).sum::<u64>(), n, "every stale read is in a bucket: {:?}", st.buckets);
    assert_eq!(st.max_us, 7_000 + 10 * (n - 1), "the exact maximum, from a read not kept");
    assert_eq!(st.max_counts, 1);
    // The exact median is 7 000 + 10 x 5 024; the histogram is within 6.25% above it.
    let exact = 7_000 + 10 * 5_024;
    assert!((exact..=exact + exact / 16).contains(&st.p50_us), "p50 {}", st.p50_us);
    assert_eq!(st.over_bound, (0..n).filter(|i| 7_000 + 10 * i > 50_000).count() as u64);
}

#[test]
fn the_stale_histogram_s_buckets_hold_their_values() {
    for v in [0u64, 1, 2, 3, 15, 16, 17, 31, 32, 33, 34, 1_000, 4_095, 4_096, 123_456_789] {
        let i = StaleDist::index(v);
        assert!(
            StaleDist::upper(i) >= v && StaleDist::upper(i) <= v + v / 16,
            "{v}: bucket {i} ends {}",
            StaleDist::upper(i)
        );
        assert!(i == 0 || StaleDist::upper(i - 1) < v, "{v}: bucket {} already holds it", i - 1);
    }
}

#[test]
fn a_user_who_drifted_from_an_unknown_op_is_not_named_by_a_double_claim() {
    // A mark_read and an overlapping delete of row 7 both replied 1 (legal: the mark
    // came first), and a create's outcome was unknown: one too low is that create's
    // increment lost, not a double decrement.
    let h = [
        ev(Create, 1, 20, (0, 5), Unknown, 0),
        ev(MarkRead, 1, 7, (10, 20), Okay, 1),
        ev(Delete, 1, 7, (15, 25), Okay, 1),
    ];
    let a = classify(&h, &[row(1, 1, 2)], None, &[], cx());
    assert_eq!((a.len(), a[0].name), (1, "lost_increment"), "{a:?}");
    assert_eq!(a[0].witnesses[0].ops, [h[0]]);
    // Three too low is more than one unknown op can leave: the double claim is named.
    let a = classify(&h, &[row(1, 0, 3)], None, &[], cx());
    assert_eq!(a[0].name, "double_decrement");
    // Without the unknown op, as before.
    assert_eq!(classify(&h[1..], &[row(1, 1, 2)], None, &[], cx())[0].name, "double_decrement");
}

#[test]
fn a_mark_all_read_that_writes_back_what_it_read_is_a_lost_update() {
    // User 1: too high, and only a mark_read raced the mark_all_read (no create): its
    // decrement was overwritten, which only a read-modify-write mark_all_read does.
    let high = [ev(MarkAllRead, 1, 0, (2, 8), Okay, 2), ev(MarkRead, 1, 3, (3, 5), Okay, 1)];
    let a = classify(&high, &[row(1, 3, 2)], None, &[], cx());
    assert_eq!((a.len(), a[0].name), (1, "lost_update"), "{a:?}");
    let ops: Vec<OpKind> = a[0].witnesses[0].ops.iter().map(|e| e.op).collect();
    assert_eq!(ops, [MarkAllRead, MarkRead]);
    // Two overlapping mark_all_reads that both changed rows: the second wrote back
    // over the first.
    let two = [ev(MarkAllRead, 3, 0, (2, 8), Okay, 2), ev(MarkAllRead, 3, 0, (3, 9), Okay, 1)];
    assert_eq!(classify(&two, &[row(3, 2, 0)], None, &[], cx())[0].name, "lost_update");
    // User 2 alone: too low with a create racing a mark_all_read, as the zeroing race.
    let low = [ev(MarkAllRead, 2, 0, (2, 8), Okay, 2), ev(Create, 2, 40, (3, 5), Okay, 1)];
    assert_eq!(classify(&low, &[row(2, 0, 1)], None, &[], cx())[0].name, "lost_increment");
    // In one run with user 1, the run has shown the read-modify-write: user 2 too.
    let mut h = high.to_vec();
    h.extend(low);
    let a = classify(&h, &[row(1, 3, 2), row(2, 0, 1)], None, &[], cx());
    assert_eq!((a.len(), a[0].name, a[0].count), (1, "lost_update", 2), "{a:?}");
    assert!(a[0].witnesses.iter().any(|w| w.user == 2 && w.note.contains("wrote back")));
    // A stale count shown beyond doubt (too high, only a create raced) keeps the
    // zeroing-or-stale users as they were: user 4 is a stale count, user 2 too.
    let stale = [ev(MarkAllRead, 4, 0, (2, 8), Okay, 3), ev(Create, 4, 50, (3, 5), Okay, 1)];
    h.extend(stale);
    let a = classify(&h, &[row(1, 3, 2), row(2, 0, 1), row(4, 1, 0)], None, &[], cx());
    let named: Vec<(&str, u64)> = a.iter().map(|a| (a.name, a.count)).collect();
    assert_eq!(named, [("stale_mark_all_read", 2), ("lost_update", 1)], "{a:?}");
}

#[test]
fn a_half_applied_op_is_named_by_the_half_it_lost() {
    // A mark_read whose counter step landed and whose row step was lost (Redis decides,
    // SQL follows): the counter is one too low, and no increment was lost.
    let h = [ev(MarkRead, 1, 9, (2, 5), Unknown, 0)];
    let a = classify(&h, &[row(1, 1, 2)], None, &[], cx());
    assert_eq!((a[0].name, a[0].witnesses[0].ops[0].op), ("lost_row_change", MarkRead), "{a:?}");
    // A create that inserted its row and lost its increment: too low, lost_increment.
    let h = [ev(Create, 1, 9, (2, 5), Unknown, 0)];
    assert_eq!(classify(&h, &[row(1, 1, 2)], None, &[], cx())[0].name, "lost_increment");
    // A create whose counter step landed and whose row did not: too high.
    assert_eq!(classify(&h, &[row(1, 3, 2)], None, &[], cx())[0].name, "lost_row_change");
    // Both kinds unknown, too low: the create's lost increment is the witness.
    let h = [ev(MarkRead, 1, 8, (0, 1), Unknown, 0), ev(Create, 1, 9, (2, 5), Unknown, 0)];
    let a = classify(&h, &[row(1, 1, 2)], None, &[], cx());
    assert_eq!((a[0].name, a[0].witnesses[0].id), ("lost_increment", 9));
}
