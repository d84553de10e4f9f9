//! Client-cost experiment: the writable-cte mark_read statement in a loop on one
//! connection, through sqlx or tokio-postgres, reporting ops/s and client CPU per op.
use std::time::{Duration, Instant};

const SQL: &str = "WITH r AS (UPDATE notifications SET is_read = true WHERE id = $1 AND user_id = $2 AND NOT is_read RETURNING 1), c AS (UPDATE unread_counts SET unread = unread - 1 WHERE user_id = $2 AND EXISTS (SELECT 1 FROM r)) SELECT count(*) FROM r";

fn cpu() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> i64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n) as i64 + 1
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (which, url, secs) = (a[1].clone(), a[2].clone(), a[3].parse::<u64>().unwrap());
    let dur = Duration::from_secs(secs);
    let mut rng = Rng(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1);
    let (n, c0, t0, t1, c1);
    match which.as_str() {
        "sqlx" => {
            use sqlx::{Connection, Row};
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            let mut k = 0u64;
            c0 = cpu();
            t0 = Instant::now();
            while t0.elapsed() < dur {
                let uid = rng.next(10000);
                let id = (uid - 1) * 100 + rng.next(100);
                let r = sqlx::query(SQL).bind(id).bind(uid).fetch_optional(&mut c).await.unwrap();
                let _: i64 = r.unwrap().get(0);
                k += 1;
            }
            t1 = t0.elapsed();
            c1 = cpu();
            n = k;
        }
        "tp" => {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            let st = client.prepare(SQL).await.unwrap();
            let mut k = 0u64;
            c0 = cpu();
            t0 = Instant::now();
            while t0.elapsed() < dur {
                let uid = rng.next(10000);
                let id = (uid - 1) * 100 + rng.next(100);
                let r = client.query_one(&st, &[&id, &uid]).await.unwrap();
                let _: i64 = r.get(0);
                k += 1;
            }
            t1 = t0.elapsed();
            c1 = cpu();
            n = k;
        }
        _ => panic!("sqlx|tp"),
    }
    println!(
        "{which} {:.0} ops/s, {n} ops, cpu {:.1} us/op",
        n as f64 / t1.as_secs_f64(),
        (c1 - c0) * 1e6 / n as f64
    );
}
