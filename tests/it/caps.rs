//! A strategy file's Redis keys are capped (issue 31): a Lua step that writes a 40 MB
//! value is found by the run's memory watcher, every further Redis step is refused, the
//! verdict is `FAIL: denied` naming the key, and teardown leaves nothing on the server.

use std::time::Duration;

use crate::util;

/// A strategy whose create step writes 40 MB into a key of its own namespace.
const BIG_VALUES: &str = r#"
name = "caps-redis"
seed = 5
strategies = ["big-values"]
backends = ["postgres"]

[data]
users = 4
notifications_per_user = 2

[workload]
workers = 1
duration_s = 4

[workload.mix]
create = 1
read_count = 1

[strategy.big-values]
guarantee = "exact"
summary = "each create also writes 40 MB into Redis"
transaction = false
redis_counters = { key = "{{u:{user}}}:c" }

[[strategy.big-values.redis_seed]]
redis = "SET"
keys = ["{{u:{user}}}:c"]
args = ["{unread}"]

[[strategy.big-values.create]]
name = "ins"
sql = { postgres = "INSERT INTO notifications (user_id) VALUES (:user) RETURNING id", mysql = "INSERT INTO notifications (user_id) VALUES (:user)", sqlite = "INSERT INTO notifications (user_id) VALUES (:user)" }
[[strategy.big-values.create]]
lua = """
redis.call('SET', KEYS[2], string.rep('x', 40 * 1024 * 1024))
return redis.call('INCR', KEYS[1])
"""
keys = ["{{u:{user}}}:c", "{{u:{user}}}:big"]

[[strategy.big-values.mark_read]]
name = "set"
sql = "UPDATE notifications SET is_read = TRUE WHERE id = :id AND user_id = :user AND NOT is_read"
[[strategy.big-values.delete]]
name = "del"
sql = "DELETE FROM notifications WHERE id = :id AND user_id = :user"
[[strategy.big-values.mark_all_read]]
name = "all"
sql = "UPDATE notifications SET is_read = TRUE WHERE user_id = :user AND NOT is_read"

[[strategy.big-values.read_count]]
name = "n"
redis = "GET"
keys = ["{{u:{user}}}:c"]

[strategy.big-values.result]
create = "ins.last_id"
mark_read = "set.rows == 1"
delete = "del.rows"
mark_all_read = "all.rows"
read_count = "n.value"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_over_the_cap_is_refused_and_fails_the_strategy_as_denied() {
    crate::require!(Postgres);
    // A Redis of the test's own: the values would swell the shared one.
    let redis = util::PrivateRedis::start_with(&[]);
    let url = format!("redis://127.0.0.1:{}", redis.1);
    let plan = util::plan(BIG_VALUES);
    let mut options = util::options(false, None);
    options.redis_url = Some(url.clone());
    let mut log = |l: &str| eprintln!("{l}");
    let run = counterlab::run::run_plan(&plan, &options, &mut log);
    let report = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the run ends").expect("a report");
    let row = &report.strategies[0];
    // (The settled reads are refused too, and say so in brackets.)
    assert!(row.check.label().starts_with("FAIL: denied"), "{:?}", row.check);
    assert!(row.check.summary.contains("over the cap of 33.6 MB per value"), "{}", row.check.summary);
    assert!(row.check.summary.contains(":big holds"), "{}", row.check.summary);
    // The watcher found it during the load: later Redis steps were refused as the
    // namespace's, not run.
    let refused = row.error_samples.iter().any(|e| e.contains("refused: Redis key {u:"));
    assert!(refused, "no step refused: {:?}", row.error_samples);
    let mut c = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("cl:*").query_async(&mut c).await.unwrap();
    assert!(keys.is_empty(), "keys left: {keys:?}");
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(&mut c).await.unwrap();
    assert_eq!(users, vec!["default".to_string()], "the run's ACL user is gone");
}
