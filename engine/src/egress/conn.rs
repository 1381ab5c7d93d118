//! One client connection under `--http`: each request is read whole (head and body), then
//! either forwarded to the upstream with its response relayed back, or answered here.
//!
//! Reading the body whole, even of a request that is answered here, is what keeps a
//! keep-alive connection in step: the next request starts where this body ends. Holding
//! the request also lets a forwarded one be sent again when a kept upstream connection
//! turns out to have been closed while idle. Bodies are a service's calls to a
//! dependency, so a bound of 16 MiB costs nothing real.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::egress::config::HttpPolicy;
use crate::egress::shared::Shared;
use crate::net::http::{
    parse_request_head, BodyFraming, ChunkedDecoder, RequestHead, ResponseTracker,
};
use crate::net::sockets::{connect_message, is_timeout};

/// Read timeout of both sockets: how often a waiting thread looks at the stop flag.
const READ_STEP: Duration = Duration::from_millis(200);
/// A keep-alive client that sends nothing for this long is closed.
const CLIENT_IDLE: Duration = Duration::from_secs(120);
/// A client that takes longer than this to send one request is closed.
const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A client that does not take a response for this long is closed.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time the upstream has to start answering before the client gets a 504.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request body accepted; a larger one is answered 413.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Bytes read per call.
const READ_CHUNK: usize = 32 * 1024;

/// Serves one client connection until it closes, fails, or the proxy stops.
pub(super) fn serve(client: TcpStream, shared: &Shared, policy: &HttpPolicy) {
    let _ = client.set_nodelay(true);
    let _ = client.set_read_timeout(Some(READ_STEP));
    let _ = client.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
    let mut conn = Conn {
        shared,
        client,
        inbuf: Vec::with_capacity(16 * 1024),
        scratch: vec![0u8; READ_CHUNK],
        upstream: None,
    };
    while let Some(head) = conn.read_head() {
        let Some(request) = conn.read_request(&head) else {
            break;
        };
        let target = head.path_and_query().unwrap_or("/");
        let path = target.split('?').next().unwrap_or("/");
        let keep_open = if policy.forwards(&head.method, path) {
            shared.stats.forwarded.add(&head.method, path);
            conn.forward(&head, &request)
        } else {
            shared.stats.dropped.add(&head.method, path);
            conn.answer_dropped(&head, policy)
        };
        if !keep_open || shared.stop.load(Ordering::Relaxed) {
            break;
        }
    }
    let _ = conn.client.shutdown(Shutdown::Both);
}

/// How relaying a response ended.
enum Relay {
    /// Complete; whether both connections may carry another request.
    Done { keep: bool },
    /// The upstream closed or failed before sending a byte.
    NothingYet,
    /// The upstream sent nothing within the timeout.
    Timeout,
    /// Failed after bytes reached the client, or the client left: close without a word.
    Abort,
}

struct Conn<'a> {
    shared: &'a Shared,
    client: TcpStream,
    /// Bytes from the client not consumed yet (a pipelined next request may wait here).
    inbuf: Vec<u8>,
    scratch: Vec<u8>,
    /// The kept upstream connection, if any.
    upstream: Option<TcpStream>,
}

impl Conn<'_> {
    /// Reads more client bytes into `inbuf`; false when the client is gone, too slow
    /// (past `deadline`), or the proxy stops.
    fn read_more(&mut self, since: Instant, limit: Duration) -> bool {
        loop {
            match self.client.read(&mut self.scratch) {
                Ok(0) => return false,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&self.scratch[..n]);
                    return true;
                }
                Err(e) if is_timeout(&e) => {
                    if self.shared.stop.load(Ordering::Relaxed) || since.elapsed() > limit {
                        return false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// Reads until a complete request head is buffered; `None` when the connection should
    /// close (client gone, idle, stopping, or a bad head that was answered).
    fn read_head(&mut self) -> Option<RequestHead> {
        let since = Instant::now();
        loop {
            match parse_request_head(&self.inbuf) {
                Ok(Some(head)) => return Some(head),
                Ok(None) => {}
                Err(e) => {
                    self.answer_error(e.status, e.message);
                    return None;
                }
            }
            let limit = if self.inbuf.is_empty() {
                CLIENT_IDLE
            } else {
                CLIENT_REQUEST_TIMEOUT
            };
            if !self.read_more(since, limit) {
                return None;
            }
        }
    }

    /// Reads the rest of the request's body and takes the whole request (head and body as
    /// received) off `inbuf`; `None` when the connection should close.
    fn read_request(&mut self, head: &RequestHead) -> Option<Vec<u8>> {
        let since = Instant::now();
        let mut end = head.head_len;
        let (mut left, mut chunked) = match head.body {
            BodyFraming::Length(n) if n > MAX_BODY_BYTES as u64 => {
                self.answer_error(413, "request body larger than 16 MiB");
                return None;
            }
            BodyFraming::Length(n) => (n, None),
            BodyFraming::Chunked => (0, Some(ChunkedDecoder::default())),
        };
        let mut continued = false;
        loop {
            let fresh = &self.inbuf[end..];
            match chunked.as_mut() {
                Some(decoder) => match decoder.feed(fresh, None) {
                    Ok(used) => {
                        end += used;
                        if decoder.is_done() {
                            break;
                        }
                    }
                    Err(_) => {
                        self.answer_error(400, "malformed chunked request body");
                        return None;
                    }
                },
                None => {
                    let take = left.min(fresh.len() as u64);
                    end += take as usize;
                    left -= take;
                    if left == 0 {
                        break;
                    }
                }
            }
            if end - head.head_len > MAX_BODY_BYTES {
                self.answer_error(413, "request body larger than 16 MiB");
                return None;
            }
            // A client that asked may wait for this before it sends the body; a forwarded
            // request's upstream may send its own as well, which clients accept (RFC 9110
            // §15.2).
            if head.expect_continue && !continued {
                if self
                    .client
                    .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                    .is_err()
                {
                    return None;
                }
                continued = true;
            }
            if !self.read_more(since, CLIENT_REQUEST_TIMEOUT) {
                return None;
            }
        }
        Some(self.inbuf.drain(..end).collect())
    }

    /// Forwards one request and relays its response; whether the client connection stays.
    fn forward(&mut self, head: &RequestHead, request: &[u8]) -> bool {
        let head_request = head.method.eq_ignore_ascii_case("HEAD");
        // A kept connection the upstream closed while idle fails the first attempt only.
        for _ in 0..2 {
            let reused = self.upstream.is_some();
            if !reused {
                match self.shared.connect_upstream() {
                    Ok(stream) => {
                        let _ = stream.set_read_timeout(Some(READ_STEP));
                        let _ = stream.set_write_timeout(Some(UPSTREAM_TIMEOUT));
                        self.upstream = Some(stream);
                    }
                    Err(e) => return self.answer_upstream_failure(head, 502, connect_message(&e)),
                }
            }
            let Some(up) = self.upstream.as_mut() else {
                return false;
            };
            if up.write_all(request).is_err() {
                self.upstream = None;
                if reused {
                    continue;
                }
                return self.answer_upstream_failure(
                    head,
                    502,
                    "the connection failed while sending",
                );
            }
            match self.relay_response(head_request) {
                Relay::Done { keep } => {
                    if !keep {
                        self.upstream = None;
                    }
                    return keep && head.keep_alive;
                }
                Relay::NothingYet if reused => self.upstream = None,
                Relay::NothingYet => {
                    self.upstream = None;
                    return self.answer_upstream_failure(
                        head,
                        502,
                        "the connection closed before a response",
                    );
                }
                Relay::Timeout => {
                    self.upstream = None;
                    return self.answer_upstream_failure(head, 504, "no response within 30 s");
                }
                Relay::Abort => {
                    self.upstream = None;
                    return false;
                }
            }
        }
        self.answer_upstream_failure(head, 502, "the connection closed before a response")
    }

    /// Relays the response as it arrives until it is complete.
    fn relay_response(&mut self, head_request: bool) -> Relay {
        let mut tracker = ResponseTracker::for_request(head_request);
        let started = Instant::now();
        loop {
            if tracker.is_complete() {
                return Relay::Done {
                    keep: tracker.keep_alive(),
                };
            }
            let Some(up) = self.upstream.as_mut() else {
                return Relay::Abort;
            };
            let failed = match up.read(&mut self.scratch) {
                Ok(0) => {
                    if tracker.finish_on_eof() {
                        return Relay::Done { keep: false };
                    }
                    true
                }
                Ok(n) => {
                    if self.client.write_all(&self.scratch[..n]).is_err() {
                        return Relay::Abort;
                    }
                    match tracker.feed(&self.scratch[..n]) {
                        Ok(used) if used == n => {}
                        // Bytes after the response: this upstream connection cannot be
                        // trusted with another request.
                        Ok(_) => return Relay::Done { keep: false },
                        Err(_) => return Relay::Abort,
                    }
                    false
                }
                Err(e) if is_timeout(&e) => {
                    if self.shared.stop.load(Ordering::Relaxed) {
                        return Relay::Abort;
                    }
                    if started.elapsed() > UPSTREAM_TIMEOUT {
                        return if tracker.started() {
                            Relay::Abort
                        } else {
                            Relay::Timeout
                        };
                    }
                    false
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(_) => true,
            };
            if failed {
                if tracker.started() {
                    self.shared
                        .stats
                        .upstream_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Relay::Abort;
                }
                return Relay::NothingYet;
            }
        }
    }

    /// The synthetic response to a request that is not forwarded.
    fn answer_dropped(&mut self, head: &RequestHead, policy: &HttpPolicy) -> bool {
        let drop = &policy.drop;
        let response = synthetic_response(
            drop.status,
            &drop.content_type,
            &drop.body,
            head.method.eq_ignore_ascii_case("HEAD"),
            !head.keep_alive,
        );
        self.client.write_all(&response).is_ok() && head.keep_alive
    }

    /// Answers an upstream failure (counted) and closes: the service sees an error at
    /// once rather than waiting on a dependency that is not there.
    fn answer_upstream_failure(&mut self, head: &RequestHead, status: u16, message: &str) -> bool {
        self.shared
            .stats
            .upstream_errors
            .fetch_add(1, Ordering::Relaxed);
        let body = format!(
            "hairline egress: upstream {}: {message}\n",
            self.shared.upstream
        );
        let response = synthetic_response(
            status,
            "text/plain",
            &body,
            head.method.eq_ignore_ascii_case("HEAD"),
            true,
        );
        let _ = self.client.write_all(&response);
        false
    }

    /// Refuses a request that cannot be read; the connection closes after it.
    fn answer_error(&mut self, status: u16, message: &str) {
        let body = format!("hairline egress: {message}\n");
        let _ = self.client.write_all(&synthetic_response(
            status,
            "text/plain",
            &body,
            false,
            true,
        ));
    }
}

/// A complete response: no body for HEAD, 204 and 304 (whose framing has none).
pub(super) fn synthetic_response(
    status: u16,
    content_type: &str,
    body: &str,
    head_request: bool,
    close: bool,
) -> Vec<u8> {
    let bodyless = matches!(status, 204 | 304);
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if !bodyless {
        out.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    out.push_str("X-Hairline-Egress: answered by the egress proxy\r\n");
    if close {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    if !bodyless && !head_request {
        out.push_str(body);
    }
    out.into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Answered",
    }
}
