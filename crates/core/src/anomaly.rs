//! The anomaly taxonomy: every name the checker can give, written once, in report order,
//! with the sentence the report's legend and docs/history.md use for it.

/// One kind of anomaly. The order is the report's order: specific causes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AnomalyKind {
    DoubleDecrement,
    DoubleApplyAfterRetry,
    LostOnFailover,
    LostIncrement,
    LostDecrement,
    LostRowChange,
    StaleMarkAllRead,
    LostUpdate,
    WrongDeleteAdjustment,
    LostFlush,
    DoubleFlush,
    DoubleApplyAfterRedelivery,
    NegativeCounter,
    LateIncrementVisible,
    ReadOutOfBounds,
    StaleCacheRead,
    StaleRead,
    StaleAfterSettle,
    UnhealedDrift,
    UnexplainedDrift,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 20] = [
        AnomalyKind::DoubleDecrement,
        AnomalyKind::DoubleApplyAfterRetry,
        AnomalyKind::LostOnFailover,
        AnomalyKind::LostIncrement,
        AnomalyKind::LostDecrement,
        AnomalyKind::LostRowChange,
        AnomalyKind::StaleMarkAllRead,
        AnomalyKind::LostUpdate,
        AnomalyKind::WrongDeleteAdjustment,
        AnomalyKind::LostFlush,
        AnomalyKind::DoubleFlush,
        AnomalyKind::DoubleApplyAfterRedelivery,
        AnomalyKind::NegativeCounter,
        AnomalyKind::LateIncrementVisible,
        AnomalyKind::ReadOutOfBounds,
        AnomalyKind::StaleCacheRead,
        AnomalyKind::StaleRead,
        AnomalyKind::StaleAfterSettle,
        AnomalyKind::UnhealedDrift,
        AnomalyKind::UnexplainedDrift,
    ];

    /// The stable snake_case name in reports, scenarios (`expect_anomaly`) and docs.
    pub fn name(self) -> &'static str {
        self.parts().0
    }

    /// What it means, in one line (the report legend).
    pub fn meaning(self) -> &'static str {
        self.parts().1
    }

    pub fn from_name(name: &str) -> Option<AnomalyKind> {
        AnomalyKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Found by reading alone (the final counters may be right).
    pub fn from_reads(self) -> bool {
        matches!(
            self,
            AnomalyKind::ReadOutOfBounds
                | AnomalyKind::LateIncrementVisible
                | AnomalyKind::StaleCacheRead
                | AnomalyKind::StaleRead
                | AnomalyKind::StaleAfterSettle
        )
    }

    fn parts(self) -> (&'static str, &'static str) {
        match self {
            AnomalyKind::DoubleDecrement => {
                ("double_decrement", "two calls each claimed the same notification's transition")
            }
            AnomalyKind::DoubleApplyAfterRetry => {
                ("double_apply_after_retry", "an op run again after an unknown outcome applied twice")
            }
            AnomalyKind::LostIncrement => ("lost_increment", "a create raced mark_all_read, or half applied"),
            AnomalyKind::LostDecrement => ("lost_decrement", "an op with an unknown outcome half applied"),
            AnomalyKind::LostRowChange => {
                ("lost_row_change", "an op with an unknown outcome moved the counter, but its row change was lost")
            }
            AnomalyKind::LostOnFailover => {
                ("lost_on_failover", "a change Redis acknowledged was lost when its shard failed over")
            }
            AnomalyKind::StaleMarkAllRead => (
                "stale_mark_all_read",
                "mark_all_read lowered the counter by a count read before another call changed it",
            ),
            AnomalyKind::LostUpdate => {
                ("lost_update", "two overlapping writes to one user's counter: one overwrote the other")
            }
            AnomalyKind::WrongDeleteAdjustment => {
                ("wrong_delete_adjustment", "a delete of a notification already read lowered the counter")
            }
            AnomalyKind::LostFlush => ("lost_flush", "the flusher lost a claimed delta"),
            AnomalyKind::DoubleFlush => ("double_flush", "the flusher applied a claimed delta twice"),
            AnomalyKind::DoubleApplyAfterRedelivery => {
                ("double_apply_after_redelivery", "the consumer applied a broker message again after its ack was lost")
            }
            AnomalyKind::NegativeCounter => ("negative_counter", "a counter below zero"),
            AnomalyKind::LateIncrementVisible => (
                "late_increment_visible",
                "a read saw a decrement of a row whose create had not yet added its increment",
            ),
            AnomalyKind::ReadOutOfBounds => ("read_out_of_bounds", "a read outside what the history allows"),
            AnomalyKind::StaleCacheRead => {
                ("stale_cache_read", "a cached read showed a count older than the cache may lag by design")
            }
            AnomalyKind::StaleRead => {
                ("stale_read", "a replica read showed a count older than the scenario's staleness bound")
            }
            AnomalyKind::StaleAfterSettle => ("stale_after_settle", "after settle, read_count differs from the truth"),
            AnomalyKind::UnhealedDrift => ("unhealed_drift", "drift left although a reconciler ran"),
            AnomalyKind::UnexplainedDrift => ("unexplained_drift", "drift no op in the history explains"),
        }
    }
}

impl crate::Named for AnomalyKind {
    const ALL: &'static [AnomalyKind] = &AnomalyKind::ALL;
    fn name(self) -> &'static str {
        AnomalyKind::name(self)
    }
}

#[cfg(test)]
mod tests {
    use super::AnomalyKind;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<&str> = AnomalyKind::ALL.iter().map(|k| k.name()).collect();
        for k in AnomalyKind::ALL {
            assert_eq!(AnomalyKind::from_name(k.name()), Some(k));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), AnomalyKind::ALL.len());
        let mut sorted = AnomalyKind::ALL;
        sorted.sort();
        assert_eq!(sorted, AnomalyKind::ALL, "ALL is in report order");
    }
}
