//! Batched load's own connections (`[workload] redis_batch`): a worker's pipeline is
//! written straight to a plain TCP connection and its replies are framed here, so a
//! batch costs no trip through redis-rs's multiplexer (a channel and a driver task per
//! request) and no pass of its streaming parser. Replies come out as the redis-rs values
//! the shared path gives (an error or an array through redis-rs's own parser).
//!
//! Only for one server over plain TCP speaking RESP2 (`redis://`, the default); a
//! cluster, TLS, a Unix socket or RESP3 keeps the shared path. A lane is lent to one
//! batch at a time and goes back to the idle list only after a whole exchange: a batch
//! that fails or is given up (the op timeout drops it mid-read) closes its lane, so no
//! reply is ever read by the wrong batch. At most `MAX_REDIS_CONNS` lanes are open. A
//! lane the server closed while it idled fails its next batch, as a pooled connection
//! fails its next command (the reconnecting manager reconnects after it): a
//! `redis_disconnect` fault reaches batches as it reaches single ops. A transaction
//! (MULTI/EXEC) or a reply set aside with `ignore()` is not for lanes: `query` leaves a
//! transaction to the shared path and reads one reply per command.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{ConnectionAddr, ErrorKind, ProtocolVersion, RedisError, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::MAX_REDIS_CONNS;
use super::target::Target;

/// Most bytes one batch's replies may take before the lane gives up on them.
const MAX_REPLY_BYTES: usize = 64 << 20;

/// Deepest array nesting a reply may have (redis-rs's own parser allows as deep).
const MAX_DEPTH: u32 = 100;

/// What a lane's read buffer starts with (and grows by when a reply is longer).
const READ_CHUNK: usize = 16 << 10;

/// Where lanes connect and who they log in as, their idle list and their count.
pub(crate) struct Lanes {
    host: String,
    port: u16,
    user: Option<String>,
    password: Option<String>,
    db: i64,
    timeout: Duration,
    idle: Mutex<Vec<Lane>>,
    open: Arc<AtomicU32>,
    /// The open lanes' `CLIENT ID`s, each with how many lanes hold it (a restarted
    /// server numbers its clients anew), for `kill_connections`.
    ids: Arc<Mutex<BTreeMap<i64, u32>>>,
}

/// One of the `MAX_REDIS_CONNS` lanes, counted from before its connect until dropped
/// (also when its connect is given up half-way).
struct Slot(Arc<AtomicU32>);

impl Slot {
    fn take(open: &Arc<AtomicU32>) -> Option<Slot> {
        let slot = Slot(open.clone());
        (open.fetch_add(1, Ordering::Relaxed) < MAX_REDIS_CONNS).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One plain connection and its buffers.
struct Lane {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Its `CLIENT ID` once logged in.
    id: Option<i64>,
    ids: Arc<Mutex<BTreeMap<i64, u32>>>,
    _slot: Slot,
}

impl Drop for Lane {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = ids.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                ids.remove(&id);
            }
        }
    }
}

fn protocol_error(what: String) -> RedisError {
    RedisError::from((ErrorKind::Parse, "unexpected reply from Redis", what))
}

/// A failure before the batch was written (connect, login): nothing of it ran, as with
/// a refused connection (`classify_redis`: failed, not unknown).
fn unsent(what: String) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::ConnectionRefused, what).into()
}

impl Lanes {
    /// Lanes to the server `target` logs in to; None where only the shared path fits
    /// (a cluster, TLS, a Unix socket, RESP3).
    pub(crate) fn new(target: &Target, timeout: Duration) -> Option<Lanes> {
        let Target::Single(client) = target else { return None };
        let info = client.get_connection_info();
        let ConnectionAddr::Tcp(host, port) = info.addr() else { return None };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        Some(Lanes {
            user: settings.username().map(String::from),
            password: settings.password().map(String::from),
            db: settings.db(),
            ..Lanes::at(host, *port, timeout)
        })
    }

    /// Lanes to `host:port` with no login, on database 0, none open yet.
    fn at(host: &str, port: u16, timeout: Duration) -> Lanes {
        Lanes {
            host: host.into(),
            port,
            user: None,
            password: None,
            db: 0,
            timeout,
            idle: Mutex::new(Vec::new()),
            open: Arc::default(),
            ids: Arc::default(),
        }
    }

    /// The `CLIENT ID`s of the lanes open now.
    pub(crate) fn client_ids(&self) -> Vec<i64> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
    }

    /// Sends `pipe` on a lane and reads its replies, one per command. None: the shared
    /// path takes it (a transaction, or no lane to spare: `MAX_REDIS_CONNS` are open).
    pub(crate) async fn query(&self, pipe: &redis::Pipeline) -> Option<RedisResult<Vec<Value>>> {
        if pipe.is_transaction() {
            return None;
        }
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut lane = match idle {
            Some(lane) => lane,
            None => match self.connect(Slot::take(&self.open)?).await {
                Ok(lane) => lane,
                Err(e) => return Some(Err(e)),
            },
        };
        let replies = lane.exchange(&pipe.get_packed_pipeline(), pipe.len()).await;
        if replies.is_ok() {
            self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(lane);
        }
        Some(replies)
    }

    /// A new lane in `slot`, logged in, on the database, its `CLIENT ID` read.
    async fn connect(&self, slot: Slot) -> RedisResult<Lane> {
        let to = TcpStream::connect((self.host.as_str(), self.port));
        let stream = match tokio::time::timeout(self.timeout, to).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(unsent(format!("connecting a batch's connection: {e}"))),
            Err(_) => return Err(unsent(format!("connecting a batch's connection: no answer in {:?}", self.timeout))),
        };
        let mut lane =
            Lane { stream, buf: Vec::with_capacity(READ_CHUNK), id: None, ids: self.ids.clone(), _slot: slot };
        lane.stream.set_nodelay(true).map_err(|e| unsent(format!("TCP_NODELAY: {e}")))?;
        let mut hello = redis::pipe();
        if let Some(password) = &self.password {
            hello.cmd("AUTH");
            if let Some(user) = &self.user {
                hello.arg(user);
            }
            hello.arg(password);
        }
        if self.db != 0 {
            hello.cmd("SELECT").arg(self.db);
        }
        hello.cmd("CLIENT").arg("ID");
        let login = "logging a batch's connection in";
        let replies =
            match tokio::time::timeout(self.timeout, lane.exchange(&hello.get_packed_pipeline(), hello.len())).await {
                Ok(Ok(replies)) => replies,
                Ok(Err(e)) => return Err(unsent(format!("{login}: {e}"))),
                Err(_) => return Err(unsent(format!("{login}: no answer in {:?}", self.timeout))),
            };
        if let Some(Value::ServerError(e)) = replies.iter().find(|r| matches!(r, Value::ServerError(_))) {
            return Err(e.clone().into());
        }
        let Some(&Value::Int(id)) = replies.last() else {
            return Err(unsent(format!("{login}: CLIENT ID replied {:?}", replies.last())));
        };
        *self.ids.lock().unwrap_or_else(|e| e.into_inner()).entry(id).or_default() += 1;
        lane.id = Some(id);
        Ok(lane)
    }
}

impl Lane {
    /// Writes `packed` (`n` commands) and reads `n` replies; more bytes than those
    /// replies mean the connection is out of step, an error.
    async fn exchange(&mut self, packed: &[u8], n: usize) -> RedisResult<Vec<Value>> {
        self.stream.write_all(packed).await?;
        let mut out = Vec::with_capacity(n);
        let mut at = 0;
        self.buf.clear();
        while out.len() < n {
            match frame_end(&self.buf, at, 0)? {
                Some(end) => {
                    out.push(value(&self.buf[at..end])?);
                    at = end;
                }
                None if self.buf.len() >= MAX_REPLY_BYTES => {
                    return Err(protocol_error(format!("replies over {MAX_REPLY_BYTES} bytes")));
                }
                None => {
                    self.buf.reserve(READ_CHUNK);
                    if self.stream.read_buf(&mut self.buf).await? == 0 {
                        let closed =
                            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "Redis closed the connection");
                        return Err(closed.into());
                    }
                }
            }
        }
        if at != self.buf.len() {
            return Err(protocol_error(format!("{} bytes past the last reply", self.buf.len() - at)));
        }
        Ok(out)
    }
}

/// The line starting at `at` and where it ends (past its CRLF); None: not all here. A
/// line that ends in a bare LF is an error, as redis-rs has it.
fn line(buf: &[u8], at: usize) -> RedisResult<Option<(&[u8], usize)>> {
    let Some(nl) = buf.get(at..).and_then(|rest| rest.iter().position(|&b| b == b'\n')) else { return Ok(None) };
    match buf[at..at + nl].strip_suffix(b"\r") {
        Some(text) => Ok(Some((text, at + nl + 1))),
        None => Err(protocol_error("a line without its CR".into())),
    }
}

fn number(text: &[u8]) -> RedisResult<i64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol_error(format!("not a length: {:?}", String::from_utf8_lossy(text))))
}

/// Where the one reply starting at `at` ends; None: not all of it has arrived.
fn frame_end(buf: &[u8], at: usize, depth: u32) -> RedisResult<Option<usize>> {
    let Some(&kind) = buf.get(at) else { return Ok(None) };
    let Some((text, next)) = line(buf, at + 1)? else { return Ok(None) };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(next)),
        b'$' => match number(text)? {
            n if n < 0 => Ok(Some(next)),
            n => {
                let end = next.saturating_add(n as usize).saturating_add(2);
                match buf.get(end - 2..end) {
                    None => Ok(None),
                    Some(b"\r\n") => Ok(Some(end)),
                    Some(_) => Err(protocol_error(format!("a bulk string of {n} bytes not ended by CRLF"))),
                }
            }
        },
        b'*' if depth >= MAX_DEPTH => Err(protocol_error(format!("arrays nested over {MAX_DEPTH} deep"))),
        b'*' => {
            let mut end = next;
            for _ in 0..number(text)?.max(0) {
                match frame_end(buf, end, depth + 1)? {
                    Some(e) => end = e,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        other => Err(protocol_error(format!("reply type {:?} (RESP2 expected)", other as char))),
    }
}

/// One whole reply as redis-rs's value: the common kinds here, the rest by redis-rs.
fn value(frame: &[u8]) -> RedisResult<Value> {
    let body = &frame[1..frame.len() - 2];
    Ok(match frame[0] {
        b':' => Value::Int(number(body)?),
        b'$' if body.starts_with(b"-") => Value::Nil,
        b'$' => {
            let start = body.iter().position(|&b| b == b'\n').map_or(body.len(), |i| i + 1);
            Value::BulkString(body[start..].to_vec())
        }
        b'+' if body == b"OK" => Value::Okay,
        _ => redis::parse_redis_value(frame)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAMES: &[&[u8]] = &[
        b":42\r\n",
        b":-7\r\n",
        b"$3\r\nabc\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"$4\r\na\r\nb\r\n",
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
        b"-ERR wrong number of arguments\r\n",
        b"*2\r\n:1\r\n$1\r\nx\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*2\r\n*1\r\n:3\r\n$-1\r\n",
    ];

    #[test]
    fn each_reply_is_the_value_redis_rs_parses() {
        for f in FRAMES {
            let ours = value(f).unwrap();
            let theirs = redis::parse_redis_value(f).unwrap();
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(f));
            assert_eq!(frame_end(f, 0, 0).unwrap(), Some(f.len()), "{}", String::from_utf8_lossy(f));
        }
    }

    #[test]
    fn a_reply_cut_anywhere_is_not_whole_yet() {
        let all: Vec<u8> = FRAMES.concat();
        let mut ends = Vec::new();
        let mut at = 0;
        while let Some(end) = frame_end(&all, at, 0).unwrap() {
            ends.push(end);
            at = end;
        }
        assert_eq!(ends.len(), FRAMES.len());
        assert_eq!(at, all.len());
        for f in FRAMES {
            for cut in 0..f.len() {
                assert_eq!(frame_end(&f[..cut], 0, 0).unwrap(), None, "{} cut at {cut}", String::from_utf8_lossy(f));
            }
        }
    }

    /// Reads from `c` until `want` whole commands (RESP arrays) have come.
    async fn commands(c: &mut TcpStream, want: usize) {
        let (mut buf, mut at, mut got) = (Vec::new(), 0, 0);
        while got < want {
            match frame_end(&buf, at, 0).unwrap() {
                Some(end) => (at, got) = (end, got + 1),
                None => assert!(c.read_buf(&mut buf).await.unwrap() > 0, "the client hung up"),
            }
        }
    }

    /// A batch given up mid-reply (the op timeout drops it) closes its lane: the next
    /// batch opens another and reads its own replies, never the late ones. The stand-in
    /// server answers the first connection's batch of two with one reply, and the rest
    /// (99, 98) only once the client has given up on it.
    #[tokio::test]
    async fn a_batch_given_up_mid_reply_closes_its_lane() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let lanes = Lanes::at("127.0.0.1", server.local_addr().unwrap().port(), Duration::from_secs(5));
        let (late_tx, late_rx) = tokio::sync::oneshot::channel::<()>();
        let stand_in = tokio::spawn(async move {
            let login = async |c: &mut TcpStream, id: i64| {
                commands(c, 1).await; // CLIENT ID
                c.write_all(format!(":{id}\r\n").as_bytes()).await.unwrap();
                commands(c, 2).await;
            };
            let (mut first, _) = server.accept().await.unwrap();
            login(&mut first, 7).await;
            first.write_all(b":1\r\n").await.unwrap();
            late_rx.await.unwrap();
            first.write_all(b":99\r\n:98\r\n").await.unwrap();
            let (mut second, _) = server.accept().await.unwrap();
            login(&mut second, 8).await;
            second.write_all(b":2\r\n:3\r\n").await.unwrap();
            (first, second)
        });
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg("k").cmd("INCR").arg("k");
        let first = tokio::time::timeout(Duration::from_millis(300), lanes.query(&pipe)).await;
        assert!(first.is_err(), "one reply of two never completes the batch: {first:?}");
        assert_eq!((lanes.client_ids(), lanes.open.load(Ordering::Relaxed)), (vec![], 0), "the lane closed");
        late_tx.send(()).unwrap();
        let second = tokio::time::timeout(Duration::from_secs(5), lanes.query(&pipe)).await;
        let second = second.expect("no hang").expect("a lane to spare").expect("the second lane answers");
        assert_eq!(second, vec![Value::Int(2), Value::Int(3)], "its own replies, not the late ones");
        assert_eq!((lanes.client_ids(), lanes.open.load(Ordering::Relaxed)), (vec![8], 1));
        stand_in.await.unwrap();
    }

    /// A connect given up half-way (the op timeout drops it) or refused gives its lane
    /// back: an address that never answers (10.255.255.1: no answer to the SYN, or no
    /// route at all) would otherwise use up the 64 lanes a batch at a time.
    #[tokio::test]
    async fn a_connect_given_up_gives_its_lane_back() {
        let lanes = Lanes::at("10.255.255.1", 6379, Duration::from_secs(5));
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg("k");
        for _ in 0..3 {
            let gone = tokio::time::timeout(Duration::from_millis(50), lanes.query(&pipe)).await;
            assert!(gone.is_err() || matches!(gone, Ok(Some(Err(_)))), "{gone:?}");
            assert_eq!(lanes.open.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn bad_replies_are_errors_not_panics() {
        assert!(frame_end(b"$x\r\nab\r\n", 0, 0).is_err());
        for bare in [&b"+\n"[..], b":42\n", b"-\n", b"$2\nab\r\n"] {
            assert!(frame_end(bare, 0, 0).is_err(), "LF without CR: {}", String::from_utf8_lossy(bare));
        }
        assert!(frame_end(b"$3\r\nabcXY", 0, 0).is_err(), "a bulk string longer than it said");
        assert!(frame_end(b"%1\r\n", 0, 0).is_err(), "RESP3 on a RESP2 lane");
        let deep: Vec<u8> = b"*1\r\n".repeat(MAX_DEPTH as usize + 1);
        assert!(frame_end(&deep, 0, 0).is_err());
    }
}
