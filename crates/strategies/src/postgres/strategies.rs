//! The three SQL strategies on PostgreSQL. Their statements live in
//! `sql/postgres/<strategy>.sql`; this file only sequences them.

use async_trait::async_trait;
use counterlab_core::{NotificationId, OpError, Strategy, StrategyInfo, UserId};
use sqlx::{PgPool, Postgres, Transaction};

use super::{COMMON_SQL, classify};
use crate::sqlfile::statement;

const DIRECT_SQL: &str = include_str!("../../sql/postgres/direct-update.sql");
const SFU_SQL: &str = include_str!("../../sql/postgres/select-for-update.sql");
const COND_SQL: &str = include_str!("../../sql/postgres/conditional-update.sql");

fn info(name: &str) -> StrategyInfo {
    *crate::find(name).expect("strategy is in the catalog")
}

/// Statements every strategy uses, looked up once.
#[derive(Clone, Copy)]
struct Common {
    insert: &'static str,
    increment: &'static str,
    decrement: &'static str,
    subtract: &'static str,
    read: &'static str,
}

impl Common {
    fn load() -> Common {
        Common {
            insert: statement(COMMON_SQL, "insert_notification"),
            increment: statement(COMMON_SQL, "counter_increment"),
            decrement: statement(COMMON_SQL, "counter_decrement"),
            subtract: statement(COMMON_SQL, "counter_subtract"),
            read: statement(COMMON_SQL, "counter_read"),
        }
    }

    async fn read_count(&self, pool: &PgPool, user: UserId) -> Result<i64, OpError> {
        let v: Option<i64> = sqlx::query_scalar(self.read)
            .bind(user)
            .fetch_optional(pool)
            .await
            .map_err(classify)?;
        Ok(v.unwrap_or(0))
    }

    /// Insert and count in one transaction (shared by the two exact strategies).
    async fn create_tx(&self, pool: &PgPool, user: UserId) -> Result<NotificationId, OpError> {
        let mut tx = pool.begin().await.map_err(classify)?;
        let id: i64 = sqlx::query_scalar(self.insert)
            .bind(user)
            .fetch_one(&mut *tx)
            .await
            .map_err(classify)?;
        sqlx::query(self.increment)
            .bind(user)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(id)
    }
}

async fn commit(tx: Transaction<'_, Postgres>) -> Result<(), OpError> {
    tx.commit().await.map_err(classify)
}

/// Read, check in the application, write; no transaction, no lock.
pub struct DirectUpdate {
    pool: PgPool,
    c: Common,
    read_state: &'static str,
    set_read: &'static str,
    delete: &'static str,
    mark_all_rows: &'static str,
    counter_zero: &'static str,
}

impl DirectUpdate {
    pub fn new(pool: PgPool) -> DirectUpdate {
        let s = |n| statement(DIRECT_SQL, n);
        DirectUpdate {
            pool,
            c: Common::load(),
            read_state: s("read_state"),
            set_read: s("set_read"),
            delete: s("delete"),
            mark_all_rows: s("mark_all_rows"),
            counter_zero: s("counter_zero"),
        }
    }

    async fn is_read(&self, user: UserId, id: NotificationId) -> Result<Option<bool>, OpError> {
        sqlx::query_scalar(self.read_state)
            .bind(id)
            .bind(user)
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)
    }
}

#[async_trait]
impl Strategy for DirectUpdate {
    fn info(&self) -> StrategyInfo {
        info("direct-update")
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        let id: i64 = sqlx::query_scalar(self.c.insert)
            .bind(user)
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        sqlx::query(self.c.increment)
            .bind(user)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(id)
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        if self.is_read(user, id).await? != Some(false) {
            return Ok(false);
        }
        sqlx::query(self.set_read)
            .bind(id)
            .bind(user)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        sqlx::query(self.c.decrement)
            .bind(user)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(true)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let Some(was_read) = self.is_read(user, id).await? else {
            return Ok(false);
        };
        sqlx::query(self.delete)
            .bind(id)
            .bind(user)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        if !was_read {
            sqlx::query(self.c.decrement)
                .bind(user)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
        }
        Ok(true)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let n = sqlx::query(self.mark_all_rows)
            .bind(user)
            .execute(&self.pool)
            .await
            .map_err(classify)?
            .rows_affected();
        sqlx::query(self.counter_zero)
            .bind(user)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        Ok(n)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.c.read_count(&self.pool, user).await
    }
}

/// Lock the rows, then decide, in one transaction.
pub struct SelectForUpdate {
    pool: PgPool,
    c: Common,
    lock_one: &'static str,
    set_read: &'static str,
    delete: &'static str,
    lock_unread: &'static str,
    set_read_many: &'static str,
}

impl SelectForUpdate {
    pub fn new(pool: PgPool) -> SelectForUpdate {
        let s = |n| statement(SFU_SQL, n);
        SelectForUpdate {
            pool,
            c: Common::load(),
            lock_one: s("lock_one"),
            set_read: s("set_read"),
            delete: s("delete"),
            lock_unread: s("lock_unread"),
            set_read_many: s("set_read_many"),
        }
    }

    async fn lock(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        user: UserId,
        id: NotificationId,
    ) -> Result<Option<bool>, OpError> {
        sqlx::query_scalar(self.lock_one)
            .bind(id)
            .bind(user)
            .fetch_optional(&mut **tx)
            .await
            .map_err(classify)
    }
}

#[async_trait]
impl Strategy for SelectForUpdate {
    fn info(&self) -> StrategyInfo {
        info("select-for-update")
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.c.create_tx(&self.pool, user).await
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        if self.lock(&mut tx, user, id).await? != Some(false) {
            commit(tx).await?;
            return Ok(false);
        }
        sqlx::query(self.set_read)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        sqlx::query(self.c.decrement)
            .bind(user)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        commit(tx).await?;
        Ok(true)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let Some(was_read) = self.lock(&mut tx, user, id).await? else {
            commit(tx).await?;
            return Ok(false);
        };
        sqlx::query(self.delete)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        if !was_read {
            sqlx::query(self.c.decrement)
                .bind(user)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        commit(tx).await?;
        Ok(true)
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let ids: Vec<i64> = sqlx::query_scalar(self.lock_unread)
            .bind(user)
            .fetch_all(&mut *tx)
            .await
            .map_err(classify)?;
        if !ids.is_empty() {
            sqlx::query(self.set_read_many)
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            sqlx::query(self.c.subtract)
                .bind(user)
                .bind(ids.len() as i64)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        commit(tx).await?;
        Ok(ids.len() as u64)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.c.read_count(&self.pool, user).await
    }
}

/// The state change is the check: the counter moves by the rows really changed.
pub struct ConditionalUpdate {
    pool: PgPool,
    c: Common,
    set_read_if_unread: &'static str,
    delete_returning: &'static str,
    mark_all_rows: &'static str,
}

impl ConditionalUpdate {
    pub fn new(pool: PgPool) -> ConditionalUpdate {
        let s = |n| statement(COND_SQL, n);
        ConditionalUpdate {
            pool,
            c: Common::load(),
            set_read_if_unread: s("set_read_if_unread"),
            delete_returning: s("delete_returning"),
            mark_all_rows: s("mark_all_rows"),
        }
    }
}

#[async_trait]
impl Strategy for ConditionalUpdate {
    fn info(&self) -> StrategyInfo {
        info("conditional-update")
    }

    async fn create(&self, user: UserId) -> Result<NotificationId, OpError> {
        self.c.create_tx(&self.pool, user).await
    }

    async fn mark_read(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let changed = sqlx::query(self.set_read_if_unread)
            .bind(id)
            .bind(user)
            .execute(&mut *tx)
            .await
            .map_err(classify)?
            .rows_affected();
        if changed == 1 {
            sqlx::query(self.c.decrement)
                .bind(user)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        commit(tx).await?;
        Ok(changed == 1)
    }

    async fn delete(&self, user: UserId, id: NotificationId) -> Result<bool, OpError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let was_read: Option<bool> = sqlx::query_scalar(self.delete_returning)
            .bind(id)
            .bind(user)
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?;
        if was_read == Some(false) {
            sqlx::query(self.c.decrement)
                .bind(user)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        commit(tx).await?;
        Ok(was_read.is_some())
    }

    async fn mark_all_read(&self, user: UserId) -> Result<u64, OpError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let n = sqlx::query(self.mark_all_rows)
            .bind(user)
            .execute(&mut *tx)
            .await
            .map_err(classify)?
            .rows_affected();
        if n > 0 {
            sqlx::query(self.c.subtract)
                .bind(user)
                .bind(n as i64)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
        }
        commit(tx).await?;
        Ok(n)
    }

    async fn read_count(&self, user: UserId) -> Result<i64, OpError> {
        self.c.read_count(&self.pool, user).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_statement_is_present() {
        // Building each strategy looks up all of its statements; a missing one panics.
        // The pool is lazy and never used, so no server is needed.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://x@127.0.0.1:1/x")
            .unwrap();
        for s in crate::CATALOG {
            let built = crate::build_postgres(s.name, pool.clone()).expect("in catalog");
            assert_eq!(built.info().name, s.name);
        }
    }
}
