//! The explorer's schedule tree: stateless depth-first enumeration of the orders in which
//! concurrent sessions' steps may run (each schedule re-run from a fresh state, following
//! a prefix of choices), with a CHESS preemption bound and a budget. No I/O: the runner
//! asks `Schedule::choose` at every point where more than one session could go on.

/// The explorer's op names, as scenarios and `--pair` spell them: create, mark_read of
/// an unread row (`b`), mark_read of another unread row (`c`), delete of an unread row
/// (`b`), delete of a read row (`a`), mark_all_read.
pub const OPS: [&str; 6] = ["create", "mark_read", "mark_read_other", "delete_unread", "delete_read", "mark_all_read"];

/// Most schedules per op pair (`--budget`, `[explore] budget`).
pub const MAX_BUDGET: u64 = 5_000;

/// One decision of a schedule: which sessions could take their next step, which did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The sessions waiting at their gate, in index order (never empty).
    pub enabled: Vec<usize>,
    pub chosen: usize,
    /// Preemptions in the schedule up to and including this choice: a switch away from
    /// a session that could have gone on (a blocked or finished one is no preemption).
    pub preemptions: u32,
}

/// Sessions as the scripts number them (from 1): `1, 2`.
fn one_based(sessions: &[usize]) -> String {
    sessions.iter().map(|s| (s + 1).to_string()).collect::<Vec<_>>().join(", ")
}

/// Whether choosing `next` after `prev` (which took the last step) preempts it.
fn preempts(prev: Option<usize>, enabled: &[usize], next: usize) -> bool {
    prev.is_some_and(|p| p != next && enabled.contains(&p))
}

/// One schedule being run: follows `prefix`, then goes on with the session that took the
/// last step while it can (no preemption), else the lowest enabled one; a seeded
/// schedule (`random`) picks among the enabled sessions from its seed instead.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    prefix: Vec<usize>,
    pub taken: Vec<Choice>,
    random: Option<crate::Rng>,
}

impl Schedule {
    /// A schedule that makes exactly these choices (a replay); `choose` refuses a choice
    /// of a session that cannot go on.
    pub fn following(prefix: Vec<usize>) -> Schedule {
        Schedule { prefix, taken: Vec::new(), random: None }
    }

    /// A schedule that picks each step uniformly among the sessions able to go on, from
    /// `seed`: one order of many, the same for the same seed and the same server answers
    /// (a property test's generated cases run under it, where no search is affordable).
    pub fn random(seed: u64) -> Schedule {
        Schedule { prefix: Vec::new(), taken: Vec::new(), random: Some(crate::Rng::new(seed)) }
    }

    /// The session to grant next among `enabled` (sorted, not empty). Err: the prefix
    /// names one that is not enabled, so the server did not answer as the first time.
    pub fn choose(&mut self, enabled: &[usize]) -> Result<usize, String> {
        assert!(!enabled.is_empty(), "a choice needs an enabled session");
        let depth = self.taken.len();
        let prev = self.taken.last().map(|c| c.chosen);
        let before = self.taken.last().map_or(0, |c| c.preemptions);
        let chosen = match self.prefix.get(depth) {
            Some(&c) if enabled.contains(&c) => c,
            Some(&c) => {
                let (c, could) = (c + 1, one_based(enabled));
                return Err(format!("step {}: session {c} was to go on but only {could} could", depth + 1));
            }
            None => match &mut self.random {
                Some(rng) => enabled[rng.below(enabled.len() as u64) as usize],
                None => prev.filter(|p| enabled.contains(p)).unwrap_or(enabled[0]),
            },
        };
        let preemptions = before + preempts(prev, enabled, chosen) as u32;
        self.taken.push(Choice { enabled: enabled.to_vec(), chosen, preemptions });
        Ok(chosen)
    }

    /// The sessions in the order they took their steps.
    pub fn order(&self) -> Vec<usize> {
        self.taken.iter().map(|c| c.chosen).collect()
    }

    pub fn preemptions(&self) -> u32 {
        self.taken.last().map_or(0, |c| c.preemptions)
    }
}

/// A node of the depth-first search: a choice made, and the alternatives tried there.
#[derive(Clone, Debug)]
struct Node {
    choice: Choice,
    tried: Vec<usize>,
}

/// Why the search stopped short of every schedule (None: it went through them all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// The budget of schedules ran out with this search still open.
    Budget,
    /// Every schedule within the preemption bound was run; `n` alternatives lay beyond it.
    Bound { pruned: u64 },
}

/// The search over one cell's schedules.
#[derive(Debug)]
pub struct Explorer {
    bound: Option<u32>,
    budget: u64,
    path: Vec<Node>,
    pub explored: u64,
    pub pruned: u64,
    next: Option<Vec<usize>>,
}

impl Explorer {
    /// `bound`: the most preemptions a schedule may have (None: any number); `budget`:
    /// the most schedules run.
    pub fn new(bound: Option<u32>, budget: u64) -> Explorer {
        Explorer { bound, budget, path: Vec::new(), explored: 0, pruned: 0, next: Some(Vec::new()) }
    }

    /// The next schedule to run, or None when the search is over (`left` says why).
    pub fn next_schedule(&mut self) -> Option<Schedule> {
        if self.explored >= self.budget {
            return None;
        }
        self.next.take().map(Schedule::following)
    }

    /// Records a schedule that ran to its end and finds the next one. Err: a replayed
    /// prefix saw other sessions enabled than the first time (the server is not
    /// deterministic here, so the search cannot go on).
    pub fn finished(&mut self, run: &Schedule) -> Result<(), String> {
        self.explored += 1;
        for (depth, c) in run.taken.iter().enumerate() {
            match self.path.get(depth) {
                Some(n) if n.choice.chosen == c.chosen && n.choice.enabled == c.enabled => {}
                Some(n) if depth + 1 < run.prefix.len() || n.choice.enabled != c.enabled => {
                    let (was, now) = (one_based(&n.choice.enabled), one_based(&c.enabled));
                    return Err(format!("step {}: sessions {was} could go on the first time, {now} now", depth + 1));
                }
                _ => {
                    self.path.truncate(depth);
                    self.path.push(Node { choice: c.clone(), tried: vec![c.chosen] });
                }
            }
        }
        self.path.truncate(run.taken.len());
        self.next = self.backtrack();
        Ok(())
    }

    /// The deepest untried alternative within the bound, as the prefix that takes it.
    fn backtrack(&mut self) -> Option<Vec<usize>> {
        while let Some(depth) = self.path.len().checked_sub(1) {
            let before = depth.checked_sub(1).map_or(0, |d| self.path[d].choice.preemptions);
            let prev = depth.checked_sub(1).map(|d| self.path[d].choice.chosen);
            let node = &mut self.path[depth];
            let untried: Vec<usize> = node.choice.enabled.iter().copied().filter(|s| !node.tried.contains(s)).collect();
            for alt in untried {
                node.tried.push(alt);
                let preemptions = before + preempts(prev, &node.choice.enabled, alt) as u32;
                if self.bound.is_some_and(|b| preemptions > b) {
                    self.pruned += 1;
                    continue;
                }
                node.choice.chosen = alt;
                node.choice.preemptions = preemptions;
                return Some(self.path.iter().map(|n| n.choice.chosen).collect());
            }
            self.path.pop();
        }
        None
    }

    /// Why the search is not complete (None: every schedule was run).
    pub fn left(&self) -> Option<Left> {
        if self.next.is_some() {
            Some(Left::Budget)
        } else if self.pruned > 0 {
            Some(Left::Bound { pruned: self.pruned })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs the explorer over sessions of fixed lengths that never block; returns every
    /// schedule's order.
    fn enumerate(lengths: &[usize], bound: Option<u32>) -> (Vec<Vec<usize>>, Explorer) {
        let mut ex = Explorer::new(bound, 1_000_000);
        let mut seen = Vec::new();
        while let Some(mut s) = ex.next_schedule() {
            let mut left = lengths.to_vec();
            loop {
                let enabled: Vec<usize> = (0..left.len()).filter(|&i| left[i] > 0).collect();
                if enabled.is_empty() {
                    break;
                }
                let c = s.choose(&enabled).unwrap();
                left[c] -= 1;
            }
            seen.push(s.order());
            ex.finished(&s).unwrap();
        }
        (seen, ex)
    }

    /// The order a seeded schedule takes over sessions of these lengths.
    fn random_order(lengths: &[usize], seed: u64) -> Vec<usize> {
        let (mut s, mut left) = (Schedule::random(seed), lengths.to_vec());
        loop {
            let enabled: Vec<usize> = (0..left.len()).filter(|&i| left[i] > 0).collect();
            if enabled.is_empty() {
                return s.order();
            }
            let c = s.choose(&enabled).unwrap();
            assert!(enabled.contains(&c));
            left[c] -= 1;
        }
    }

    #[test]
    fn a_seeded_schedule_repeats_from_its_seed_and_seeds_reach_other_orders() {
        assert_eq!(random_order(&[3, 3], 7), random_order(&[3, 3], 7));
        let orders: std::collections::BTreeSet<Vec<usize>> = (0..64).map(|k| random_order(&[3, 3], k)).collect();
        // 20 interleavings of two 3-step sessions: 64 seeds reach most of them, the
        // serial ones (no preemption, the default schedule's only pick) among others.
        assert!(orders.len() >= 12, "{}", orders.len());
        assert!(orders.iter().any(|o| o.windows(2).filter(|w| w[0] != w[1]).count() >= 3));
    }

    fn factorial(n: usize) -> u64 {
        (1..=n as u64).product()
    }

    /// Every interleaving of sessions of these lengths, with its preemption count.
    fn brute(lengths: &[usize]) -> Vec<(Vec<usize>, u32)> {
        fn go(left: &mut Vec<usize>, order: &mut Vec<usize>, out: &mut Vec<(Vec<usize>, u32)>) {
            let enabled: Vec<usize> = (0..left.len()).filter(|&i| left[i] > 0).collect();
            if enabled.is_empty() {
                let mut p = 0;
                let mut rem = vec![0usize; left.len()];
                for &s in order.iter() {
                    rem[s] += 1;
                }
                for w in 1..order.len() {
                    rem[order[w - 1]] -= 1;
                    p += (order[w] != order[w - 1] && rem[order[w - 1]] > 0) as u32;
                }
                out.push((order.clone(), p));
                return;
            }
            for s in enabled {
                left[s] -= 1;
                order.push(s);
                go(left, order, out);
                order.pop();
                left[s] += 1;
            }
        }
        let mut out = Vec::new();
        go(&mut lengths.to_vec(), &mut Vec::new(), &mut out);
        out
    }

    proptest! {
        #[test]
        fn unbounded_search_runs_every_interleaving_once(lengths in prop::collection::vec(1usize..5, 1..4)) {
            let (seen, ex) = enumerate(&lengths, None);
            let total: usize = lengths.iter().sum();
            let multinomial = factorial(total) / lengths.iter().map(|&n| factorial(n)).product::<u64>();
            prop_assert_eq!(seen.len() as u64, multinomial);
            let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
            prop_assert_eq!(distinct.len(), seen.len());
            prop_assert_eq!(ex.left(), None);
        }

        #[test]
        fn the_bound_keeps_exactly_the_schedules_with_that_many_preemptions(
            lengths in prop::collection::vec(1usize..5, 2..4),
            bound in 0u32..3,
        ) {
            let (seen, ex) = enumerate(&lengths, Some(bound));
            let mut want: Vec<Vec<usize>> =
                brute(&lengths).into_iter().filter(|(_, p)| *p <= bound).map(|(o, _)| o).collect();
            let mut got = seen.clone();
            want.sort();
            got.sort();
            prop_assert_eq!(&got, &want);
            let all = brute(&lengths).len();
            prop_assert_eq!(ex.left().is_some(), want.len() < all, "pruned {}", ex.pruned);
        }
    }

    #[test]
    fn the_budget_stops_the_search_and_says_so() {
        let mut ex = Explorer::new(None, 2);
        for _ in 0..2 {
            let mut s = ex.next_schedule().unwrap();
            let mut left = [2usize, 2];
            while let Some(enabled) =
                Some((0..2).filter(|&i| left[i] > 0).collect::<Vec<_>>()).filter(|e| !e.is_empty())
            {
                left[s.choose(&enabled).unwrap()] -= 1;
            }
            ex.finished(&s).unwrap();
        }
        assert!(ex.next_schedule().is_none());
        assert_eq!(ex.left(), Some(Left::Budget));
    }

    #[test]
    fn a_replay_that_cannot_follow_its_prefix_is_an_error() {
        let mut s = Schedule::following(vec![1, 0]);
        assert!(s.choose(&[0]).is_err());
    }
}
