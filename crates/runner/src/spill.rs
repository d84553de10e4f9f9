//! A run's history beyond memory: the calls stay in memory up to `SPILL_AFTER`, then go
//! to `SPILL_PARTS` temporary files split by user (54 bytes a call), written by a thread
//! of their own while the load runs; the checks then load one part at a time
//! (`counterlab_core::HistoryParts`), so memory holds one part, not the run.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use counterlab_core::{Event, HistoryParts, OpKind, Outcome, UserId, sort_history};
use counterlab_sim::HistorySink;

/// Calls held in memory before a history spills to files (about 64 MB).
pub const SPILL_AFTER: usize = 1 << 20;
/// Files a spilled history is split into, by user: a part holds about 1/64 of the calls
/// (more when one user has a large share of them: a user's calls stay together).
pub const SPILL_PARTS: usize = 64;
/// Chunks of calls waiting for the writer thread; a full queue makes workers wait for
/// the disk (bounded memory, not dropped calls).
const QUEUE: usize = 16;
/// Bytes of one call in a part file.
const RECORD: usize = 54;

/// The part (file) a user's calls go to: a multiplicative hash, so the hot low user ids
/// of a Zipf skew spread over the parts.
pub fn part_of(user: UserId) -> usize {
    ((user as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SPILL_PARTS
}

fn encode(e: &Event, out: &mut [u8; RECORD]) {
    let op = OpKind::ALL.iter().position(|k| *k == e.op).unwrap_or(0) as u8;
    let outcome = match e.outcome {
        Outcome::Ok => 0u8,
        Outcome::Fail => 1,
        Outcome::Unknown => 2,
    };
    out[0..4].copy_from_slice(&e.worker.to_le_bytes());
    out[4] = op;
    out[5] = outcome;
    let words = [e.user as u64, e.id as u64, e.invoke_us, e.complete_us, e.observed as u64];
    for (i, w) in words.iter().enumerate() {
        out[6 + 8 * i..14 + 8 * i].copy_from_slice(&w.to_le_bytes());
    }
    out[46..50].copy_from_slice(&e.attempts.to_le_bytes());
    out[50..54].copy_from_slice(&e.unknown_attempts.to_le_bytes());
}

fn decode(b: &[u8; RECORD]) -> Option<Event> {
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let outcome = match b[5] {
        0 => Outcome::Ok,
        1 => Outcome::Fail,
        2 => Outcome::Unknown,
        _ => return None,
    };
    Some(Event {
        worker: u32_at(0),
        op: *OpKind::ALL.get(b[4] as usize)?,
        outcome,
        user: u64_at(6) as i64,
        id: u64_at(14) as i64,
        invoke_us: u64_at(22),
        complete_us: u64_at(30),
        observed: u64_at(38) as i64,
        attempts: u32_at(46),
        unknown_attempts: u32_at(50),
    })
}

/// Part files being written.
pub struct SpillWriter {
    dir: tempfile::TempDir,
    files: Vec<BufWriter<File>>,
    counts: Vec<u64>,
}

impl SpillWriter {
    /// Empty part files in a fresh temporary directory under `parent` (None: the
    /// system's temporary directory).
    pub fn new(parent: Option<&Path>) -> io::Result<SpillWriter> {
        let dir = match parent {
            Some(p) => tempfile::Builder::new().prefix("counterlab-history-").tempdir_in(p)?,
            None => tempfile::Builder::new().prefix("counterlab-history-").tempdir()?,
        };
        let files = (0..SPILL_PARTS)
            .map(|i| {
                File::create(dir.path().join(format!("part-{i:02}.bin"))).map(|f| BufWriter::with_capacity(1 << 16, f))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(SpillWriter { dir, files, counts: vec![0; SPILL_PARTS] })
    }

    pub fn write(&mut self, events: &[Event]) -> io::Result<()> {
        let mut rec = [0u8; RECORD];
        for e in events {
            let p = part_of(e.user);
            encode(e, &mut rec);
            self.files[p].write_all(&rec)?;
            self.counts[p] += 1;
        }
        Ok(())
    }

    pub fn finish(self) -> io::Result<Spilled> {
        for mut f in self.files {
            f.flush()?;
        }
        Ok(Spilled { dir: self.dir, counts: self.counts })
    }
}

/// Spills `events` (from any number of sources, in any order) into part files at once
/// (the benches' and tests' entry point; a run's history goes through `HistoryStore`).
pub fn spill(events: impl IntoIterator<Item = Event>, parent: Option<&Path>) -> io::Result<Spilled> {
    let mut w = SpillWriter::new(parent)?;
    let mut chunk = Vec::with_capacity(4096);
    for e in events {
        chunk.push(e);
        if chunk.len() == chunk.capacity() {
            w.write(&chunk)?;
            chunk.clear();
        }
    }
    w.write(&chunk)?;
    w.finish()
}

/// A history in part files (removed when dropped).
pub struct Spilled {
    dir: tempfile::TempDir,
    counts: Vec<u64>,
}

impl Spilled {
    pub fn len(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Part `i`'s calls, sorted.
    fn read_part(&self, i: usize) -> Result<Vec<Event>, String> {
        let path = self.dir.path().join(format!("part-{i:02}.bin"));
        let bad = |e: String| format!("history part {}: {e}", path.display());
        let f = File::open(&path).map_err(|e| bad(e.to_string()))?;
        let mut r = BufReader::with_capacity(1 << 16, f);
        let mut out = Vec::with_capacity(self.counts[i] as usize);
        let mut rec = [0u8; RECORD];
        for n in 0..self.counts[i] {
            r.read_exact(&mut rec).map_err(|e| bad(e.to_string()))?;
            out.push(decode(&rec).ok_or_else(|| bad(format!("record {n} is not a call")))?);
        }
        sort_history(&mut out);
        Ok(out)
    }
}

impl HistoryParts for Spilled {
    fn parts(&self) -> usize {
        SPILL_PARTS
    }

    fn part_of(&self, user: UserId) -> usize {
        part_of(user)
    }

    fn load(&mut self, i: usize) -> Result<Cow<'_, [Event]>, String> {
        self.read_part(i).map(Cow::Owned)
    }
}

/// A run's history: in memory (sorted) or spilled.
pub enum History {
    Memory(Vec<Event>),
    Spilled(Spilled),
}

impl History {
    pub fn len(&self) -> u64 {
        match self {
            History::Memory(v) => v.len() as u64,
            History::Spilled(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The history as JSON Lines: by completion time in memory; a spilled one part by
    /// part (each by completion time), so it is written without holding it all.
    pub fn write_jsonl(&mut self, w: &mut impl Write) -> Result<(), String> {
        for i in 0..self.parts() {
            let part = self.load(i)?;
            counterlab_report::write_history_to(&part, w).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl HistoryParts for History {
    fn parts(&self) -> usize {
        match self {
            History::Memory(_) => 1,
            History::Spilled(s) => s.parts(),
        }
    }

    fn part_of(&self, user: UserId) -> usize {
        match self {
            History::Memory(_) => 0,
            History::Spilled(s) => s.part_of(user),
        }
    }

    fn load(&mut self, i: usize) -> Result<Cow<'_, [Event]>, String> {
        match self {
            History::Memory(v) => Ok(Cow::Borrowed(v)),
            History::Spilled(s) => s.load(i),
        }
    }
}

enum State {
    Memory(Vec<Event>),
    Spilling { tx: SyncSender<Vec<Event>>, writer: JoinHandle<io::Result<Spilled>> },
    Failed(String),
}

/// The driver's `HistorySink` for one run: memory first, files past `spill_after` calls.
pub struct HistoryStore {
    spill_after: usize,
    state: Mutex<State>,
}

impl fmt::Debug for HistoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HistoryStore(spill after {})", self.spill_after)
    }
}

impl HistoryStore {
    pub fn new(spill_after: usize) -> HistoryStore {
        HistoryStore { spill_after, state: Mutex::new(State::Memory(Vec::new())) }
    }

    /// The calls recorded, once the load has ended (later calls to `accept` are lost);
    /// an error when a part file could not be written.
    pub fn finish(&self) -> Result<History, String> {
        let state = std::mem::replace(&mut *self.state.lock().expect("history lock"), State::Failed("finished".into()));
        match state {
            State::Memory(mut v) => {
                sort_history(&mut v);
                Ok(History::Memory(v))
            }
            State::Spilling { tx, writer } => {
                drop(tx);
                let joined = writer.join().map_err(|_| "the history writer panicked".to_string())?;
                joined.map(History::Spilled).map_err(|e| format!("spilling the history: {e}"))
            }
            State::Failed(e) => Err(e),
        }
    }

    /// Starts the writer thread with `first` as its first chunk.
    fn start_spill(first: Vec<Event>) -> Result<State, String> {
        let mut w = SpillWriter::new(None).map_err(|e| format!("spilling the history: {e}"))?;
        let (tx, rx) = sync_channel::<Vec<Event>>(QUEUE);
        let writer = std::thread::Builder::new()
            .name("history-spill".into())
            .spawn(move || {
                w.write(&first)?;
                drop(first);
                for chunk in rx {
                    w.write(&chunk)?;
                }
                w.finish()
            })
            .map_err(|e| format!("spilling the history: {e}"))?;
        Ok(State::Spilling { tx, writer })
    }
}

impl HistorySink for HistoryStore {
    fn accept(&self, mut calls: Vec<Event>) {
        let tx = {
            let mut state = self.state.lock().expect("history lock");
            match &mut *state {
                State::Memory(v) => {
                    v.append(&mut calls);
                    if v.len() >= self.spill_after {
                        let first = std::mem::take(v);
                        *state = Self::start_spill(first).unwrap_or_else(State::Failed);
                    }
                    return;
                }
                State::Spilling { tx, .. } => tx.clone(),
                State::Failed(_) => return,
            }
        };
        // Outside the lock: a full queue holds this worker's thread (on a one-thread run,
        // every worker) until the writer thread takes a chunk: the load waits for the
        // disk rather than grow memory. A writer that failed has dropped its end;
        // `finish` reports its error.
        tx.send(calls).ok();
    }
}

#[cfg(test)]
mod tests {
    use counterlab_core::{
        CheckInput, Context, Guarantee, ReadSource, SeedSpec, check_reads_from, check_reads_parts, classify,
        classify_parts,
    };

    use super::*;

    /// xorshift64*: a messy history, not a model's: overlapping calls, every outcome,
    /// reads that fit and reads that do not.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    fn messy_history(seed: u64, calls: usize, users: u64) -> Vec<Event> {
        let mut r = Rng(seed | 1);
        (0..calls)
            .map(|i| {
                let op = OpKind::ALL[r.below(OpKind::ALL.len() as u64) as usize];
                let invoke_us = i as u64 * 3 + r.below(40);
                let outcome = match r.below(20) {
                    0 => Outcome::Unknown,
                    1 => Outcome::Fail,
                    _ => Outcome::Ok,
                };
                let observed = match op {
                    OpKind::ReadCount => r.below(25) as i64,
                    OpKind::MarkAllRead => r.below(4) as i64,
                    _ => r.below(2) as i64,
                };
                Event {
                    worker: r.below(8) as u32,
                    op,
                    user: r.below(users) as i64 + 1,
                    id: r.below(40) as i64 + 1,
                    invoke_us,
                    complete_us: invoke_us + r.below(60),
                    outcome,
                    observed,
                    attempts: 1,
                    unknown_attempts: (r.below(30) == 0) as u32,
                }
            })
            .collect()
    }

    fn context(users: u64) -> Context {
        Context {
            guarantee: Guarantee::Exact,
            lost_flushes: 3,
            double_flushes: 2,
            double_applies: (2, 1),
            reconciler: false,
            seed: SeedSpec { n_users: users, notifications_per_user: 20, initial_read_per_user: 5 },
            failover_us: Some((30_000, 31_000)),
        }
    }

    #[test]
    fn a_spilled_history_checks_exactly_as_the_history_in_memory() {
        let users = 400;
        let mut events = messy_history(7, 100_000, users);
        let mut r = Rng(99);
        let rows: Vec<CheckInput> = (1..=users as i64)
            .map(|u| {
                let truth = r.below(16) as i64;
                let drift = [0, 0, 0, 1, -1, 2, -3][r.below(7) as usize];
                CheckInput { user: u, counter: Some(truth + drift), truth }
            })
            .collect();
        // Spilled in the order the calls came, and with the workers' chunks shuffled.
        let mut spilled = spill(events.iter().rev().copied(), None).unwrap();
        assert_eq!(spilled.len(), events.len() as u64);
        sort_history(&mut events);
        for source in
            [ReadSource::Counter, ReadSource::Cache { lag_us: 50 }, ReadSource::Replica { bound_us: Some(20) }]
        {
            let whole = check_reads_from(&events, &|_| 15, source);
            let parts = check_reads_parts(&mut spilled, &|_| 15, source).unwrap();
            assert!(whole.violations_total > 10_000, "enough violations to keep only some: {}", whole.violations_total);
            assert_eq!(whole, parts, "{source:?}");
            let a = classify(&events, &rows, Some(&whole), &[], context(users));
            let b = classify_parts(&mut spilled, &rows, Some(&parts), &[], context(users)).unwrap();
            assert!(a.len() >= 5, "several kinds of anomaly: {:?}", a.iter().map(|a| a.name).collect::<Vec<_>>());
            assert_eq!(a, b, "{source:?}");
        }
    }

    #[test]
    fn the_store_spills_past_its_threshold_and_keeps_every_call() {
        let events = messy_history(3, 10_000, 50);
        for spill_after in [usize::MAX, 1000] {
            let store = HistoryStore::new(spill_after);
            for chunk in events.chunks(700) {
                store.accept(chunk.to_vec());
            }
            let mut history = store.finish().unwrap();
            assert_eq!(matches!(history, History::Spilled(_)), spill_after == 1000);
            let mut back = Vec::new();
            for i in 0..history.parts() {
                back.extend_from_slice(&history.load(i).unwrap());
            }
            let mut want = events.clone();
            sort_history(&mut want);
            sort_history(&mut back);
            assert_eq!(back, want);
        }
    }

    #[test]
    fn a_call_survives_its_encoding() {
        let e = Event {
            worker: 7,
            op: OpKind::MarkAllRead,
            user: -3,
            id: 1 << 40,
            invoke_us: 5,
            complete_us: u64::MAX - 1,
            outcome: Outcome::Unknown,
            observed: -9,
            attempts: 3,
            unknown_attempts: 2,
        };
        let mut rec = [0u8; RECORD];
        encode(&e, &mut rec);
        assert_eq!(decode(&rec), Some(e));
        rec[5] = 9;
        assert_eq!(decode(&rec), None, "an unknown outcome byte is refused");
    }
}
