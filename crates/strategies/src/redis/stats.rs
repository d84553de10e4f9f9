//! Redis's own command statistics for a namespace's cost (`StrategyReport.cost`): `INFO
//! commandstats` of every primary, summed, as (counter, value) pairs
//! (`<command>.calls`, `.usec`, `.failed_calls`, `.rejected_calls`). Server-wide: Redis
//! keeps no figures per client or per ACL user.

use counterlab_core::OpError;

use super::{RedisSpace, classify_redis};

impl RedisSpace {
    /// Every command's calls, microseconds and failures so far, summed over the primaries
    /// (as the configured account). The reading itself is one `info` call per primary.
    pub async fn command_stats(&self) -> Result<Vec<(String, i64)>, OpError> {
        let mut sums: std::collections::BTreeMap<String, i64> = Default::default();
        for mut conn in self.client.node_conns(true).await.map_err(classify_redis)? {
            let text: String =
                redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.map_err(classify_redis)?;
            for (k, v) in parse_commandstats(&text) {
                *sums.entry(k).or_default() += v;
            }
        }
        Ok(sums.into_iter().collect())
    }
}

/// `cmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=1`
/// as `evalsha.calls` 3, `evalsha.usec` 40, `evalsha.rejected_calls` 0,
/// `evalsha.failed_calls` 1 (the ratio is left out: it does not subtract).
fn parse_commandstats(text: &str) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((cmd, fields)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        for (k, v) in fields.split(',').filter_map(|f| f.split_once('=')) {
            if let Ok(v) = v.parse::<i64>() {
                out.push((format!("{cmd}.{k}"), v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_lines_become_counters_and_ratios_are_left_out() {
        let text = "# Commandstats\r\ncmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=1\r\ncmdstat_config|get:calls=2,usec=5,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n";
        let got = parse_commandstats(text);
        assert_eq!(got[0], ("evalsha.calls".to_string(), 3));
        assert_eq!(got[1], ("evalsha.usec".to_string(), 40));
        assert!(got.iter().all(|(k, _)| !k.ends_with("usec_per_call")));
        assert!(got.contains(&("config|get.calls".to_string(), 2)));
        assert_eq!(got.len(), 8);
    }
}
