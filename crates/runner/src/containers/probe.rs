//! Fast, bounded probes: does a server accept TCP connections at an address (a connect
//! timeout, not a pool's), and does a Docker engine answer its `/_ping`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Whether something accepts a TCP connection at `host:port` within `timeout` (each
/// resolved address tried once, so at most `timeout` per address).
pub fn tcp_answers(host: &str, port: u16, timeout: Duration) -> bool {
    let Ok(addrs) = (host, port).to_socket_addrs() else { return false };
    addrs.take(4).any(|a| TcpStream::connect_timeout(&a, timeout).is_ok())
}

/// The Docker engine a container would be started on, and whether it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerEngine {
    /// Where it was looked for (`DOCKER_HOST`, else the default sockets).
    pub tried: Vec<String>,
    /// The endpoint that answered `/_ping` with 200, if any.
    pub answered: Option<String>,
}

impl DockerEngine {
    pub fn answers(&self) -> bool {
        self.answered.is_some()
    }

    /// `no Docker engine at unix:///var/run/docker.sock, ...`, for messages.
    pub fn describe(&self) -> String {
        match &self.answered {
            Some(e) => format!("a Docker engine at {e}"),
            None => format!("no Docker engine at {}", self.tried.join(", ")),
        }
    }
}

/// The endpoints to try: `DOCKER_HOST` when set, else the system socket, the rootless
/// one and Docker Desktop's.
fn endpoints() -> Vec<String> {
    if let Some(h) = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
        return vec![h];
    }
    let mut out = vec!["unix:///var/run/docker.sock".to_string()];
    if let Ok(d) = std::env::var("XDG_RUNTIME_DIR") {
        out.push(format!("unix://{d}/docker.sock"));
    }
    if let Ok(h) = std::env::var("HOME") {
        out.push(format!("unix://{h}/.docker/run/docker.sock"));
    }
    out
}

/// Sends `GET /_ping` and reads the status line, each step bounded by `timeout`.
fn ping(stream: &mut (impl Read + Write), timeout_ok: bool) -> bool {
    if !timeout_ok || stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = 0;
    // Bounded: at most 64 bytes, each read bounded by the stream's timeout.
    while got < 16 {
        match stream.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    let head = String::from_utf8_lossy(&buf[..got]);
    head.starts_with("HTTP/1.") && head.split(' ').nth(1) == Some("200")
}

/// Whether the engine at one endpoint answers `/_ping` within `timeout`. A `tcp://`
/// endpoint with TLS (`DOCKER_TLS_VERIFY`) counts when its port accepts: the probe
/// speaks no TLS.
fn endpoint_answers(endpoint: &str, timeout: Duration) -> bool {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else { return false };
        let ok = s.set_read_timeout(Some(timeout)).is_ok() && s.set_write_timeout(Some(timeout)).is_ok();
        return ping(&mut s, ok);
    }
    let Some(hostport) = endpoint.strip_prefix("tcp://") else { return false };
    let Some((host, port)) = hostport.trim_end_matches('/').rsplit_once(':') else { return false };
    let Ok(port) = port.parse::<u16>() else { return false };
    if std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty()) {
        return tcp_answers(host, port, timeout);
    }
    let Some(addr) = (host, port).to_socket_addrs().ok().and_then(|mut a| a.next()) else { return false };
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else { return false };
    let ok = s.set_read_timeout(Some(timeout)).is_ok() && s.set_write_timeout(Some(timeout)).is_ok();
    ping(&mut s, ok)
}

/// Looks for a Docker engine, at most `timeout` per endpoint tried.
pub fn docker_engine(timeout: Duration) -> DockerEngine {
    let tried = endpoints();
    let answered = tried.iter().find(|e| endpoint_answers(e, timeout)).cloned();
    DockerEngine { tried, answered }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_closed_port_is_detected_at_once_and_an_open_one_answers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(tcp_answers("127.0.0.1", port, Duration::from_millis(300)));
        drop(listener);
        let t = Instant::now();
        assert!(!tcp_answers("127.0.0.1", port, Duration::from_millis(300)));
        // Refused, not timed out: well under the bound (a generous margin on a loaded machine).
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn a_fake_engine_is_recognised_by_its_ping_reply_and_anything_else_is_not() {
        let dir = tempfile::tempdir().unwrap();
        for (reply, expected) in [("HTTP/1.1 200 OK\r\n\r\nOK", true), ("HTTP/1.1 404 Not Found\r\n\r\n", false)] {
            let path = dir.path().join(format!("{expected}.sock"));
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            let server = std::thread::spawn(move || {
                let (mut c, _) = listener.accept().unwrap();
                let mut req = [0u8; 256];
                let n = c.read(&mut req).unwrap();
                assert!(String::from_utf8_lossy(&req[..n]).starts_with("GET /_ping "));
                c.write_all(reply.as_bytes()).unwrap();
            });
            assert_eq!(endpoint_answers(&format!("unix://{}", path.display()), Duration::from_secs(2)), expected);
            server.join().unwrap();
        }
        let missing = format!("unix://{}/none.sock", dir.path().display());
        assert!(!endpoint_answers(&missing, Duration::from_millis(300)));
        assert!(!endpoint_answers("ssh://somewhere", Duration::from_millis(300)));
    }
}
