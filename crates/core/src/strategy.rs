//! The contract every counter strategy implements, whatever backend keeps its counter.

use async_trait::async_trait;

use crate::model::{Guarantee, NotificationId, OpError, UserId};

/// Static description of a strategy, shown by `counterlab list` and in reports.
#[derive(Clone, Copy, Debug)]
pub struct StrategyInfo {
    /// Stable kebab-case name used in scenarios and on the command line.
    pub name: &'static str,
    pub guarantee: Guarantee,
    /// One line: how it keeps the counter and why it is (or is not) safe.
    pub summary: &'static str,
}

/// One way to keep a per-user unread counter next to the notification rows.
///
/// Every method is one application-level operation as a request handler would run it;
/// the driver times it, records its outcome and never retries it blindly.
#[async_trait]
pub trait Strategy: Send + Sync {
    fn info(&self) -> StrategyInfo;

    /// Inserts an unread notification for `user` and counts it; returns its id.
    async fn create(&self, user: UserId) -> Result<NotificationId, OpError>;

    /// Marks one notification read; returns whether this call changed it from unread.
    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError>;

    /// Deletes one notification; returns whether this call deleted a row.
    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError>;

    /// Marks every notification of `user` read; returns how many this call changed.
    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError>;

    /// The number the application would show on the badge.
    async fn read_count(&self, user: UserId) -> Result<i64, OpError>;
}
