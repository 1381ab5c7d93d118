//! The egress proxy against a real upstream on loopback, in process.

use super::*;
use clap::Parser;
use serde_json::{json, Value};
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: EgressArgs,
}

fn args(extra: &[&str]) -> EgressArgs {
    // One stats file per proxy: the tests run in parallel in one process.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let stats =
        std::env::temp_dir().join(format!("hairline-egress-{}-{n}.json", std::process::id()));
    let stats = stats.to_string_lossy().into_owned();
    let mut argv = vec![
        "egress",
        "--listen",
        "127.0.0.1:0",
        "--stats",
        stats.as_str(),
    ];
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).expect("flags parse").args
}

/// An upstream that answers every request (bodiless ones, as the tests send) with
/// `items` and remembers its request lines.
struct Upstream {
    addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
    accepted: Arc<AtomicUsize>,
}

fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (seen, count) = (Arc::clone(&lines), Arc::clone(&accepted));
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let seen = Arc::clone(&seen);
            thread::spawn(move || serve_items(stream, &seen));
        }
    });
    Upstream {
        addr,
        lines,
        accepted,
    }
}

fn serve_items(mut stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some(head)) = crate::net::http::parse_request_head(&buf) {
            if let Ok(mut lines) = seen.lock() {
                lines.push(format!("{} {}", head.method, head.target));
            }
            buf.drain(..head.head_len);
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nitems";
            if stream.write_all(answer).is_err() {
                return;
            }
            continue;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn start(upstream: SocketAddr, extra: &[&str]) -> Running {
    let up = upstream.to_string();
    let mut flags = vec!["--upstream", up.as_str()];
    flags.extend_from_slice(extra);
    let config = args(&flags).validate().expect("valid flags");
    Running(Egress::start(config, Arc::new(AtomicBool::new(false))).expect("started"))
}

/// A proxy whose stats file goes with it.
struct Running(Egress);

impl std::ops::Deref for Running {
    type Target = Egress;
    fn deref(&self) -> &Egress {
        &self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0.stats_path);
    }
}

/// Sends `bytes` and reads until `responses` complete responses have arrived.
fn exchange(client: &mut TcpStream, bytes: &[u8], responses: usize) -> Vec<String> {
    client.write_all(bytes).expect("sent");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut done = Vec::new();
    while done.len() < responses {
        let mut tracker = ResponseTracker::for_request(false);
        let used = tracker.feed(&buf).expect("a response");
        if tracker.is_complete() {
            done.push(String::from_utf8_lossy(&buf[..used]).into_owned());
            buf.drain(..used);
            continue;
        }
        let n = client.read(&mut chunk).expect("a response in time");
        assert!(n > 0, "closed after {done:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
    done
}

use crate::net::http::ResponseTracker;

#[test]
fn a_dropped_write_never_touches_the_upstream() {
    let up = upstream();
    let egress = start(up.addr, &["--http"]);
    let mut client = TcpStream::connect(egress.local_addr()).expect("connect");
    let answers = exchange(
        &mut client,
        b"POST /orders?id=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        1,
    );
    assert!(answers[0].starts_with("HTTP/1.1 200 OK"), "{answers:?}");
    assert!(answers[0].ends_with("\r\n\r\n{}"), "{answers:?}");
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        0,
        "no upstream connection"
    );
    let dropped = egress.stats().dropped.snapshot();
    assert_eq!(
        dropped.get("POST /orders"),
        Some(&1),
        "counted without the query"
    );
    assert!(egress.stats().forwarded.snapshot().is_empty());
}

#[test]
fn a_chunked_body_is_consumed_so_the_next_request_on_the_connection_parses() {
    let up = upstream();
    let egress = start(
        up.addr,
        &["--http", "--drop-status", "202", "--drop-body", "queued"],
    );
    let mut client = TcpStream::connect(egress.local_addr()).expect("connect");
    let pipelined = b"PUT /cart HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
        5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: t\r\n\r\n\
        GET /items?page=2 HTTP/1.1\r\nHost: x\r\n\r\n";
    let answers = exchange(&mut client, pipelined, 2);
    assert!(
        answers[0].starts_with("HTTP/1.1 202 Accepted"),
        "{answers:?}"
    );
    assert!(answers[0].ends_with("queued"), "{answers:?}");
    assert!(answers[1].ends_with("items"), "{answers:?}");
    // The same connection carries a third request.
    let third = exchange(&mut client, b"HEAD /items HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert!(third[0].starts_with("HTTP/1.1 200"), "{third:?}");
    let lines = up.lines.lock().expect("lock").clone();
    assert_eq!(lines, ["GET /items?page=2", "HEAD /items"]);
    let forwarded = egress.stats().forwarded.snapshot();
    assert_eq!(forwarded.get("GET /items"), Some(&1));
    assert_eq!(forwarded.get("HEAD /items"), Some(&1));
    assert_eq!(egress.stats().dropped.snapshot().get("PUT /cart"), Some(&1));
}

#[test]
fn a_named_endpoint_is_forwarded_and_an_unreachable_upstream_is_a_502() {
    let up = upstream();
    let egress = start(
        up.addr,
        &["--http", "--forward", "POST /v1/lookup", "--forward", "GET"],
    );
    let mut client = TcpStream::connect(egress.local_addr()).expect("connect");
    let answers = exchange(
        &mut client,
        b"POST /v1/lookup HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        1,
    );
    assert!(answers[0].ends_with("items"), "{answers:?}");
    assert_eq!(up.lines.lock().expect("lock").clone(), ["POST /v1/lookup"]);

    let closed = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let egress = start(closed, &["--http"]);
    let mut client = TcpStream::connect(egress.local_addr()).expect("connect");
    let answers = exchange(&mut client, b"GET /items HTTP/1.1\r\nHost: x\r\n\r\n", 1);
    assert!(answers[0].starts_with("HTTP/1.1 502"), "{answers:?}");
    assert_eq!(egress.stats().upstream_errors.load(Ordering::SeqCst), 1);
}

#[test]
fn the_stats_file_is_json_with_the_counts() {
    let up = upstream();
    let egress = start(up.addr, &["--http"]);
    egress.stats().dropped.add("POST", "/orders");
    egress.write_stats().expect("written");
    let text = std::fs::read_to_string(&egress.stats_path).expect("readable");
    let value: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(value["dropped"]["POST /orders"], 1);
    assert_eq!(value["connections"], 0);
    assert_eq!(value["forwarded"], json!({}));
}

#[test]
fn forward_rules_match_methods_endpoints_and_prefixes() {
    let get = ForwardRule::parse("GET").expect("valid");
    assert!(get.matches("GET", "/anything"));
    assert!(!get.matches("POST", "/anything"));
    let one = ForwardRule::parse("POST /v1/lookup").expect("valid");
    assert!(one.matches("POST", "/v1/lookup"));
    assert!(!one.matches("POST", "/v1/lookup/2"));
    let prefix = ForwardRule::parse("POST /v1/search/*").expect("valid");
    assert!(prefix.matches("POST", "/v1/search/users"));
    assert!(ForwardRule::parse("get").is_err());
    assert!(ForwardRule::parse("POST v1").is_err());
}

#[test]
fn bad_flags_are_reported_together() {
    let err = args(&[
        "--upstream",
        "nowhere",
        "--http",
        "--forward",
        "post",
        "--drop-status",
        "100",
    ])
    .validate()
    .expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("--upstream"), "{text}");
    assert!(text.contains("--forward"), "{text}");
    assert!(text.contains("--drop-status"), "{text}");
}
