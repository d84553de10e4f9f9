//! `Recipe`: everything the runner asks of a strategy before and while it builds one, the
//! same questions for a built-in's registry row and a strategy file, so the runner never
//! asks which of the two it holds (`Registry::recipe` is the one lookup).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use counterlab_core::{Dialect, OpError, Strategy, StrategyInfo};
use counterlab_spec::CustomSpec;

use crate::custom::CustomStrategy;
use crate::db::Db;
use crate::mq::{MqConfig, MqSpace};
use crate::redis::{RedisConfig, RedisSpace};
use crate::registry::{Build, Builtin, Registry};
use crate::replica::RedisLayout;

/// What a cell hands a recipe to build its strategy: the namespace's database and, when
/// the recipe needs them, the run's Redis key space and broker queue.
pub struct Ingredients {
    pub db: Db,
    pub redis: Option<RedisSpace>,
    pub mq: Option<MqSpace>,
    pub redis_cfg: RedisConfig,
    pub mq_cfg: MqConfig,
}

/// Why a recipe built nothing.
#[derive(Debug)]
pub enum BuildError {
    /// A server it needs was not handed to it.
    Missing(&'static str),
    /// Its own setup failed (a strategy file's setup statements or scripts).
    Setup(OpError),
}

/// Where a strategy's `read_count` can be served from a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaRead {
    /// From a PostgreSQL standby (the built-in SQL designs: one counter row).
    Standby,
    /// From a Redis replica, reading this key layout.
    Redis(RedisLayout),
    /// Not at all: its read combines SQL and Redis, goes through a cache, or is a file's.
    No,
}

/// One way to build a strategy, and what it needs and offers, asked before it is built.
#[async_trait]
pub trait Recipe: Send + Sync {
    fn info(&self) -> StrategyInfo;
    fn needs_redis(&self) -> bool;
    fn needs_amqp(&self) -> bool;
    /// Why it cannot run on `dialect`, if it cannot.
    fn unsupported_on(&self, dialect: Dialect) -> Option<String>;
    fn replica_read(&self) -> ReplicaRead;
    /// What the design needs beyond the SQL database, for the decision view (a reconciler,
    /// when one runs, is added by the runner).
    fn moving_parts(&self) -> Vec<String>;
    /// Whether its steps are counterlab's own code. A strategy file's are not: the servers
    /// must confine it (or the user trust it), its Redis memory is watched against a cap,
    /// and its reads may write.
    fn trusted(&self) -> bool;
    /// Why it cannot run on a Redis Cluster (a step's keys in different slots), if it cannot.
    fn cluster_refusal(&self) -> Option<String>;
    async fn build(&self, with: Ingredients) -> Result<Arc<dyn Strategy>, BuildError>;
}

#[async_trait]
impl Recipe for Builtin {
    fn info(&self) -> StrategyInfo {
        self.info
    }

    fn needs_redis(&self) -> bool {
        matches!(self.build, Build::Redis(_))
    }

    fn needs_amqp(&self) -> bool {
        matches!(self.build, Build::Mq(_))
    }

    fn unsupported_on(&self, dialect: Dialect) -> Option<String> {
        let (on, why) = self.unsupported;
        on.contains(&dialect).then(|| why.to_string())
    }

    fn replica_read(&self) -> ReplicaRead {
        match (self.build, self.layout) {
            (Build::Sql(_), _) => ReplicaRead::Standby,
            (_, Some(layout)) => ReplicaRead::Redis(layout),
            (_, None) => ReplicaRead::No,
        }
    }

    fn moving_parts(&self) -> Vec<String> {
        let parts: &[&str] = match (self.parts, self.build) {
            (declared, _) if !declared.is_empty() => declared,
            (_, Build::Sql(_)) => &[],
            (_, Build::Redis(_)) => &["Redis"],
            (_, Build::Mq(_)) => &["RabbitMQ", "consumer", "eventual reads"],
        };
        parts.iter().map(|p| p.to_string()).collect()
    }

    fn trusted(&self) -> bool {
        true
    }

    fn cluster_refusal(&self) -> Option<String> {
        None
    }

    async fn build(&self, with: Ingredients) -> Result<Arc<dyn Strategy>, BuildError> {
        match (self.build, with.redis, with.mq) {
            (Build::Sql(f), _, _) => Ok(f(self.info, with.db)),
            (Build::Redis(f), Some(space), _) => Ok(f(self.info, with.db, space, with.redis_cfg)),
            (Build::Redis(_), None, _) => Err(BuildError::Missing("needs Redis and has none")),
            (Build::Mq(f), _, Some(mq)) => Ok(f(self.info, with.db, mq, with.mq_cfg)),
            (Build::Mq(_), _, None) => Err(BuildError::Missing("needs RabbitMQ and has none")),
        }
    }
}

#[async_trait]
impl Recipe for CustomSpec {
    fn info(&self) -> StrategyInfo {
        CustomSpec::info(self)
    }

    fn needs_redis(&self) -> bool {
        CustomSpec::needs_redis(self)
    }

    fn needs_amqp(&self) -> bool {
        false
    }

    fn unsupported_on(&self, dialect: Dialect) -> Option<String> {
        (!self.dialects().contains(&dialect)).then(|| format!("{} has no {} statements", self.name, dialect.name()))
    }

    fn replica_read(&self) -> ReplicaRead {
        ReplicaRead::No
    }

    fn moving_parts(&self) -> Vec<String> {
        if CustomSpec::needs_redis(self) { vec!["Redis".to_string()] } else { Vec::new() }
    }

    fn trusted(&self) -> bool {
        false
    }

    fn cluster_refusal(&self) -> Option<String> {
        self.cross_slot()
    }

    async fn build(&self, with: Ingredients) -> Result<Arc<dyn Strategy>, BuildError> {
        let built = CustomStrategy::build(self, with.db, with.redis).await.map_err(BuildError::Setup)?;
        Ok(Arc::new(built))
    }
}

impl Registry {
    /// The recipe named `name`: a strategy file of the plan (`files`) first, else a
    /// built-in row.
    pub fn recipe<'a>(&'a self, files: &'a BTreeMap<String, CustomSpec>, name: &str) -> Option<&'a dyn Recipe> {
        match files.get(name) {
            Some(spec) => Some(spec),
            None => self.find(name).map(|b| b as &dyn Recipe),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::BUILTINS;
    use counterlab_core::Guarantee;

    #[test]
    fn every_design_declares_what_it_needs_beyond_sql() {
        for b in BUILTINS {
            let parts = b.moving_parts();
            match b.build {
                Build::Sql(_) => assert!(parts.is_empty(), "{}: {parts:?}", b.info.name),
                Build::Redis(_) => assert!(parts.iter().any(|p| p.starts_with("Redis")), "{}: {parts:?}", b.info.name),
                Build::Mq(_) => assert!(parts.contains(&"RabbitMQ".to_string()), "{}: {parts:?}", b.info.name),
            }
            if b.info.guarantee == Guarantee::Eventual {
                assert!(parts.iter().any(|p| p.starts_with("eventual reads")), "{}: {parts:?}", b.info.name);
            }
            assert!(
                b.layout.is_none() || matches!(b.build, Build::Redis(_)),
                "{}: a layout without Redis",
                b.info.name
            );
        }
        let find = |n: &str| BUILTINS.iter().find(|b| b.info.name == n).unwrap();
        assert_eq!(find("zset-buffer").moving_parts(), ["Redis", "flusher", "eventual reads (pending deltas)"]);
        assert_eq!(find("mq-consumer-idempotent").moving_parts(), ["RabbitMQ", "consumer", "eventual reads"]);
        assert_eq!(find("redis-set").layout, Some(RedisLayout::SetCard));
        assert!(find("writable-cte").unsupported_on(Dialect::Sqlite).is_some());
        assert!(find("writable-cte").unsupported_on(Dialect::Postgres).is_none());
    }
}
