//! The recorder in-process, in front of a small echo server on loopback: requests and
//! responses pass unchanged, and the trace it writes is read back by the engine's own
//! trace reader (the contract with `hairline-engine load --trace`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use clap::Parser;
use hairline_engine::format::trace::Trace;
use hairline_engine::record::{
    parse_request_head, BodyFraming, ChunkedDecoder, RecordArgs, Recorder, ResponseTracker,
};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: RecordArgs,
}

/// Answers every request with a chunked echo of its method, target and body, keep-alive.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            thread::spawn(move || echo_connection(stream));
        }
    });
    addr
}

fn echo_connection(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let head = loop {
            if let Ok(Some(head)) = parse_request_head(&buf) {
                break head;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..head.head_len);
        let mut body = Vec::new();
        match head.body {
            BodyFraming::Length(n) => {
                while (buf.len() as u64) < n {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
                body.extend(buf.drain(..n as usize));
            }
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::default();
                loop {
                    let used = decoder.feed(&buf, Some(&mut body)).unwrap();
                    buf.drain(..used);
                    if decoder.is_done() {
                        break;
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
            }
        }
        let mut answer = format!("{} {}\n", head.method, head.target).into_bytes();
        answer.extend_from_slice(&body);
        // Two chunks, so the proxy has to follow chunked framing in the response too.
        let (a, b) = answer.split_at(answer.len() / 2);
        let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for part in [a, b] {
            if !part.is_empty() {
                out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                out.extend_from_slice(part);
                out.extend_from_slice(b"\r\n");
            }
        }
        out.extend_from_slice(b"0\r\n\r\n");
        if stream.write_all(&out).is_err() {
            return;
        }
    }
}

fn recorder(upstream: SocketAddr, out: &Path, extra: &[&str]) -> Recorder {
    let upstream = format!("http://{upstream}");
    let out = out.to_string_lossy().into_owned();
    let mut argv = vec![
        "record",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--out",
        &out,
    ];
    argv.extend_from_slice(extra);
    let config = Cli::parse_from(argv).args.validate().unwrap();
    Recorder::start(config, Arc::new(AtomicBool::new(false))).unwrap()
}

/// Sends raw request bytes (in pieces, with pauses between them) and reads one response.
fn exchange(stream: &mut TcpStream, method: &str, pieces: &[&[u8]]) -> Vec<u8> {
    for piece in pieces {
        stream.write_all(piece).unwrap();
        thread::sleep(Duration::from_millis(20));
    }
    let mut tracker = ResponseTracker::new(method);
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    while !tracker.is_complete() {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before the response was complete");
        assert_eq!(tracker.feed(&chunk[..n]).unwrap(), n);
        response.extend_from_slice(&chunk[..n]);
    }
    response
}

fn temp_trace(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "hairline-record-{}-{name}.jsonl",
        std::process::id()
    ))
}

#[test]
fn requests_pass_unchanged_and_the_trace_reads_back() {
    let upstream = echo_server();
    let out = temp_trace("roundtrip");
    let rec = recorder(
        upstream,
        &out,
        &["--label", r"^/api/(\w+)$=api-$1", "--key-header", "x-user"],
    );
    let mut client = TcpStream::connect(rec.local_addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let get = exchange(
        &mut client,
        "GET",
        &[b"GET /api/feed?user=1 HTTP/1.1\r\nHost: h\r\nX-User: u1\r\n\r\n"],
    );
    assert!(get.ends_with(b"\r\n0\r\n\r\n"));
    assert!(String::from_utf8_lossy(&get).contains("GET /api/f"));

    let post = exchange(
        &mut client,
        "POST",
        &[
            b"POST /api/search HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello",
            b" world",
        ],
    );
    assert!(String::from_utf8_lossy(&post).contains("hello"));

    let chunked = exchange(
        &mut client,
        "PUT",
        &[
            b"PUT /upload?x=1 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nX-User: u2\r\n\r\n",
            b"5\r\nchunk\r\n",
            b"6\r\ned bod\r\n1\r\ny\r\n0\r\n\r\n",
        ],
    );
    let text = String::from_utf8_lossy(&chunked);
    // The echo comes back in two chunks, split in the middle: "PUT /upload?x=" and the rest.
    assert!(
        text.contains("PUT /upload?x=") && text.contains("chunked body"),
        "{text}"
    );
    drop(client);

    let counters = rec.shutdown();
    assert_eq!(
        (counters.proxied, counters.sampled, counters.written),
        (3, 3, 3)
    );
    assert_eq!(counters.dropped + counters.upstream_errors, 0);

    let trace = Trace::load(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    let r = &trace.requests;
    assert_eq!(r.len(), 3);
    assert_eq!(
        (r[0].method.as_str(), r[0].path.as_str()),
        ("GET", "/api/feed?user=1")
    );
    assert_eq!(r[0].endpoint, "api-feed");
    assert_eq!(r[0].key.as_deref(), Some("u1"));
    assert_eq!(r[1].body, b"hello world");
    assert_eq!(r[1].endpoint, "api-search");
    assert_eq!(r[1].key, None);
    assert_eq!(r[2].body, b"chunked body");
    assert_eq!(r[2].endpoint, "/upload");
    // Framing headers are the engine's to write at replay, not the recording's.
    assert!(r.iter().flat_map(|q| &q.headers).all(|(n, _)| ![
        "host",
        "content-length",
        "transfer-encoding"
    ]
    .contains(&n.to_ascii_lowercase().as_str())));
    assert!(r.windows(2).all(|w| w[0].ts_us <= w[1].ts_us));
}

#[test]
fn an_upstream_that_is_down_gets_502_and_is_counted() {
    // A port that was just free: nothing listens there.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = temp_trace("down");
    let rec = recorder(closed, &out, &[]);
    let mut client = TcpStream::connect(rec.local_addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let answer = exchange(&mut client, "GET", &[b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n"]);
    assert!(answer.starts_with(b"HTTP/1.1 502 "));
    let counters = rec.shutdown();
    assert_eq!((counters.proxied, counters.upstream_errors), (1, 1));
    // The request was real: it is recorded even though the upstream failed.
    assert_eq!(counters.written, 1);
    std::fs::remove_file(&out).unwrap();
}

/// Answers one request per connection as if keep-alive, then closes it soon after: what a
/// server with a short idle timeout does to a proxy's kept connection.
fn closing_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !matches!(parse_request_head(&buf), Ok(Some(_))) {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                thread::sleep(Duration::from_millis(50));
            });
        }
    });
    addr
}

#[test]
fn a_kept_connection_the_upstream_closed_is_replaced_without_an_error() {
    let upstream = closing_server();
    let out = temp_trace("stale");
    let rec = recorder(upstream, &out, &[]);
    let mut client = TcpStream::connect(rec.local_addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // 300 ms apart: the request goes out on the dead connection and is sent again;
    // 1.2 s apart: the idle connection is probed and replaced before it is used.
    for pause_ms in [0, 300, 1200] {
        thread::sleep(Duration::from_millis(pause_ms));
        let answer = exchange(
            &mut client,
            "POST",
            &[b"POST /w HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"],
        );
        assert!(
            answer.starts_with(b"HTTP/1.1 200 OK"),
            "after {pause_ms} ms"
        );
    }
    let counters = rec.shutdown();
    assert_eq!((counters.proxied, counters.upstream_errors), (3, 0));
    std::fs::remove_file(&out).unwrap();
}
