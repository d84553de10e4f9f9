//! Threading experiment: N clients running the writable-cte statement, either as tasks of
//! one multi-thread runtime of 2 workers ("mt") or split over 2 threads, each a
//! current-thread runtime with its own connections ("groups"), as pgbench -j 2 splits them.
//! Ops and CPU are counted over one window that opens after every client has connected.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SQL: &str = "WITH r AS (UPDATE notifications SET is_read = true WHERE id = $1 AND user_id = $2 AND NOT is_read RETURNING 1), c AS (UPDATE unread_counts SET unread = unread - 1 WHERE user_id = $2 AND EXISTS (SELECT 1 FROM r)) SELECT count(*) FROM r";

/// Time for every client to connect before the measured window opens; nothing is
/// measured before it, and a client still connecting then fails the run.
const LEAD: Duration = Duration::from_secs(3);

fn cpu() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

async fn client(url: String, seed: u64, start: Instant, dur: Duration, done: Arc<AtomicU64>) {
    use sqlx::{Connection, Row};
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut s = seed | 1;
    let mut next = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n) as i64 + 1
    };
    assert!(Instant::now() < start + LEAD, "connected after the window opened");
    tokio::time::sleep_until((start + LEAD).into()).await;
    let end = start + LEAD + dur;
    let mut k = 0;
    while Instant::now() < end {
        let uid = next(10000);
        let id = (uid - 1) * 100 + next(100);
        let r = sqlx::query(SQL).bind(id).bind(uid).fetch_optional(&mut c).await.unwrap();
        let _: i64 = r.unwrap().get(0);
        k += u64::from(Instant::now() <= end);
    }
    done.fetch_add(k, Ordering::Relaxed);
}

async fn client_tp(url: String, seed: u64, start: Instant, dur: Duration, done: Arc<AtomicU64>) {
    let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let st = c.prepare(SQL).await.unwrap();
    let mut s = seed | 1;
    let mut next = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n) as i64 + 1
    };
    assert!(Instant::now() < start + LEAD, "connected after the window opened");
    tokio::time::sleep_until((start + LEAD).into()).await;
    let end = start + LEAD + dur;
    let mut k = 0;
    while Instant::now() < end {
        let uid = next(10000);
        let id = (uid - 1) * 100 + next(100);
        let r = c.query_one(&st, &[&id, &uid]).await.unwrap();
        let _: i64 = r.get(0);
        k += u64::from(Instant::now() <= end);
    }
    done.fetch_add(k, Ordering::Relaxed);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (mode, url, secs, n) = (a[1].clone(), a[2].clone(), a[3].parse::<u64>().unwrap(), a[4].parse::<u64>().unwrap());
    let dur = Duration::from_secs(secs);
    let seed0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    // The process's CPU over the window alone, read by a thread that sleeps through it.
    let meter = std::thread::spawn(move || {
        std::thread::sleep((start + LEAD).saturating_duration_since(Instant::now()));
        let c0 = cpu();
        std::thread::sleep((start + LEAD + dur).saturating_duration_since(Instant::now()));
        (c0, cpu())
    });
    match mode.as_str() {
        "mt" => {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async {
                let hs: Vec<_> = (0..n)
                    .map(|i| tokio::spawn(client(url.clone(), seed0 ^ (i * 7919), start, dur, done.clone())))
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            });
        }
        "one" => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(client(url.clone(), seed0, start, dur, done.clone()));
        }
        "tpmt" => {
            let rt = if n == 1 {
                tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
            } else {
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
            };
            rt.block_on(async {
                let hs: Vec<_> = (0..n)
                    .map(|i| tokio::spawn(client_tp(url.clone(), seed0 ^ (i * 7919), start, dur, done.clone())))
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            });
        }
        "groups" => {
            let ths: Vec<_> = (0..2u64)
                .map(|g| {
                    let (url, done) = (url.clone(), done.clone());
                    std::thread::spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                        rt.block_on(async {
                            let ls = tokio::task::LocalSet::new();
                            ls.run_until(async {
                                let hs: Vec<_> = (0..n / 2)
                                    .map(|i| {
                                        let s = seed0 ^ ((g * n + i) * 7919);
                                        tokio::task::spawn_local(client(url.clone(), s, start, dur, done.clone()))
                                    })
                                    .collect();
                                for h in hs {
                                    h.await.unwrap();
                                }
                            })
                            .await
                        })
                    })
                })
                .collect();
            for t in ths {
                t.join().unwrap();
            }
        }
        _ => panic!("mt|groups"),
    }
    let (c0, c1) = meter.join().unwrap();
    let k = done.load(Ordering::Relaxed);
    println!("{mode} {n} {:.0} ops/s, {k} ops, cpu {:.1} us/op (window only)", k as f64 / secs as f64, (c1 - c0) * 1e6 / k as f64);
}
