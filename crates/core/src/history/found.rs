//! What the classifier finds and knows: witnesses, named anomalies, the accumulator
//! they are gathered in, and the context beside the history (`classify` and `drift`
//! both write into it; neither imports the other's types).

use std::collections::BTreeMap;

use super::Event;
use super::parts::{HistoryParts, completed_upto};
use crate::anomaly::AnomalyKind;
use crate::model::{Guarantee, NotificationId, UserId};
use crate::seed::SeedSpec;

/// Witnesses kept per anomaly.
pub const MAX_WITNESSES: usize = 8;

/// One piece of evidence for an anomaly: the user (and notification), the ops that
/// conflict, and the counter expected against the one observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    pub user: UserId,
    pub id: NotificationId,
    pub ops: Vec<Event>,
    pub expected: i64,
    pub observed: i64,
    pub note: String,
}

impl Witness {
    /// When the witness became visible: the latest completion among its ops.
    fn at_us(&self) -> u64 {
        self.ops.iter().map(|e| e.complete_us).max().unwrap_or(u64::MAX)
    }
}

/// A named anomaly, how many times it occurred and up to `MAX_WITNESSES` witnesses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// `kind.name()`.
    pub name: &'static str,
    pub count: u64,
    pub witnesses: Vec<Witness>,
    /// Calls completed up to the first witness's last op (all of them when the anomaly
    /// is only visible in the final state).
    pub ops_to_detect: u64,
}

/// What the classifier knows beside the history.
#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub guarantee: Guarantee,
    /// Deltas the strategy itself counted as lost / applied twice by its flusher.
    pub lost_flushes: u64,
    pub double_flushes: u64,
    /// Broker messages the strategy's consumer counted as applied twice (redelivered
    /// after an apply whose ack was lost): those that raised a counter, and those that
    /// lowered one (a doubled delta moves its user's counter its own way).
    pub double_applies: (u64, u64),
    /// A reconciler ran: drift left after settle is drift it never healed.
    pub reconciler: bool,
    /// The seed's layout (which ids each user started with, and which of them read).
    pub seed: SeedSpec,
    /// A Redis failover ran from the first to the second time (microseconds from the
    /// load's start, spanning every scheduled failover): changes acknowledged in between
    /// may have reached only the primary that lost them.
    pub failover_us: Option<(u64, u64)>,
}

/// The post-settle read of one user: what `read_count` showed and the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettledRead {
    pub user: UserId,
    pub shown: i64,
    pub truth: i64,
}

/// The anomalies found so far: per kind, how many times and every witness.
pub(super) struct Acc {
    pub(super) found: BTreeMap<AnomalyKind, (u64, Vec<Witness>)>,
}

impl Acc {
    pub(super) fn add(&mut self, kind: AnomalyKind, w: Witness) {
        let e = self.found.entry(kind).or_default();
        e.0 += 1;
        e.1.push(w);
    }

    /// Every kind found, in the enum's order (the map is keyed by the enum: nothing can be
    /// dropped), with its earliest witnesses and the calls it took to see the first
    /// (counted over every part of the history in one pass).
    pub(super) fn finish(self, parts: &mut dyn HistoryParts) -> Result<Vec<Anomaly>, String> {
        let mut found: Vec<(AnomalyKind, u64, Vec<Witness>)> = self
            .found
            .into_iter()
            .map(|(kind, (count, mut ws))| {
                ws.sort_by_key(|w| (w.at_us(), w.user));
                ws.truncate(MAX_WITNESSES);
                (kind, count, ws)
            })
            .collect();
        let firsts: Vec<u64> = found.iter().map(|(_, _, ws)| ws.first().map_or(u64::MAX, |w| w.at_us())).collect();
        let (done, total) = completed_upto(parts, &firsts)?;
        Ok(found
            .drain(..)
            .zip(firsts.iter().zip(done))
            .map(|((kind, count, witnesses), (t, done))| {
                let ops_to_detect = if *t == u64::MAX { total } else { done };
                Anomaly { kind, name: kind.name(), count, witnesses, ops_to_detect }
            })
            .collect())
    }
}
