//! One client connection: requests are forwarded to the upstream byte for byte, responses
//! come back byte for byte, and a copy of the chosen requests goes to the writer.
//!
//! Each client connection has its own thread and its own keep-alive connection to the
//! upstream, with blocking sockets: a request costs two reads and two writes and no
//! hand-off between threads, which is what keeps the added latency small on few cores.
//! Recording touches this path only through a mutex held for a counter and a random
//! number, a copy of the request, and `try_send` on bounded queues: nothing here ever
//! waits on the writer, the disk or the mirror.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::net::http::{
    parse_request_head, BodyFraming, ChunkedDecoder, HeadError, RequestHead, ResponseTracker,
};
use crate::net::sockets::{connect_message, is_timeout};
use crate::record::capture::Capture;
use crate::record::shared::Shared;

/// Read timeout of the upstream socket: how often a thread waiting for a response looks
/// at the stop flag and the upstream timeout.
const POLL_STEP: Duration = Duration::from_millis(100);
/// Read timeout of an idle client. Idle threads are woken at a stop by shutting their
/// socket's read side, so this only bounds how late the idle and head timeouts fire; a
/// long one keeps thousands of idle keep-alive clients from waking the CPU.
const CLIENT_READ_STEP: Duration = Duration::from_secs(1);
/// A keep-alive client that sends nothing for this long is closed.
const CLIENT_IDLE: Duration = Duration::from_secs(120);
/// A client that takes longer than this to send a request head is closed.
const CLIENT_HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// A client that does not take a response for this long is closed.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes read per call.
const READ_CHUNK: usize = 32 * 1024;
/// A kept upstream connection idle for longer than this is probed before it is reused.
const IDLE_PROBE_AFTER: Duration = Duration::from_secs(1);
/// A request up to this size is kept whole until its response starts, so that it can be
/// sent again on a fresh connection when a reused one turns out to be closed.
const RETRY_COPY_BYTES: usize = 64 * 1024;

/// Serves one client connection until it closes, fails, or the recorder stops.
pub fn serve(client: TcpStream, shared: &Shared) {
    let _ = client.set_nodelay(true);
    let _ = client.set_read_timeout(Some(CLIENT_READ_STEP));
    let _ = client.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
    let mut conn = ClientConn {
        shared,
        client,
        inbuf: Vec::with_capacity(16 * 1024),
        scratch: vec![0u8; READ_CHUNK],
        upstream: None,
    };
    while let Some(head) = conn.read_head() {
        if let Next::Close = conn.handle(head) {
            break;
        }
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
    }
    let _ = conn.client.shutdown(Shutdown::Both);
}

enum Next {
    KeepOpen,
    Close,
}

struct Upstream {
    stream: TcpStream,
    /// Responses completed on this connection.
    served: u64,
    /// When its last response completed.
    idle_since: Instant,
}

impl Upstream {
    /// Whether the upstream closed this kept connection while it was idle (or sent bytes
    /// nobody asked for). Checked only after a pause, when servers' idle timeouts bite.
    fn closed_while_idle(&self) -> bool {
        if self.idle_since.elapsed() < IDLE_PROBE_AFTER {
            return false;
        }
        let mut byte = 0u8;
        // SAFETY: a one-byte buffer that outlives the call; MSG_PEEK leaves the data queued.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock
    }
}

struct ClientConn<'a> {
    shared: &'a Shared,
    client: TcpStream,
    /// Bytes from the client not consumed yet (a pipelined next request may wait here).
    inbuf: Vec<u8>,
    scratch: Vec<u8>,
    upstream: Option<Upstream>,
}

/// Where the request body stands.
enum BodyLeft {
    Length(u64),
    Chunked(ChunkedDecoder),
}

impl BodyLeft {
    fn done(&self) -> bool {
        match self {
            BodyLeft::Length(n) => *n == 0,
            BodyLeft::Chunked(d) => d.is_done(),
        }
    }

    /// Takes body bytes from the front of `input`; returns (bytes consumed, decoded copy
    /// when chunked and wanted).
    fn take(&mut self, input: &[u8], want: bool) -> Result<(usize, Option<Vec<u8>>), ()> {
        match self {
            BodyLeft::Length(n) => {
                let take = (*n).min(input.len() as u64) as usize;
                *n -= take as u64;
                Ok((take, None))
            }
            BodyLeft::Chunked(d) => {
                let mut decoded = want.then(Vec::new);
                let used = d.feed(input, decoded.as_mut()).map_err(|_| ())?;
                Ok((used, decoded))
            }
        }
    }
}

/// How a forwarded request ended.
enum Outcome {
    /// The response was forwarded whole; whether both connections may be reused.
    Done { reuse: bool },
    /// Something failed after response bytes reached the client, or the client left:
    /// close without another word.
    Abort,
    /// Nothing reached the client yet: answer with this status and close.
    Fail(u16, &'static str),
}

impl ClientConn<'_> {
    /// Reads until a complete request head is buffered; `None` when the connection should
    /// close (client gone, idle, stopping, or a bad head that was answered).
    fn read_head(&mut self) -> Option<RequestHead> {
        let started = Instant::now();
        loop {
            match parse_request_head(&self.inbuf) {
                Ok(Some(head)) => return Some(head),
                Ok(None) => {}
                Err(e) => {
                    self.refuse(&e);
                    return None;
                }
            }
            let limit = if self.inbuf.is_empty() {
                CLIENT_IDLE
            } else {
                CLIENT_HEAD_TIMEOUT
            };
            match self.client.read(&mut self.scratch) {
                Ok(0) => return None,
                Ok(n) => self.inbuf.extend_from_slice(&self.scratch[..n]),
                Err(e) if is_timeout(&e) => {
                    if self.shared.stop.load(Ordering::Relaxed) || started.elapsed() > limit {
                        return None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    fn refuse(&mut self, e: &HeadError) {
        let reason = match e.status {
            431 => "Request Header Fields Too Large",
            501 => "Not Implemented",
            _ => "Bad Request",
        };
        let body = format!("hairline record: {}\n", e.message);
        let _ = self.client.write_all(
            format!(
                "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                e.status,
                body.len()
            )
            .as_bytes(),
        );
    }

    fn handle(&mut self, head: RequestHead) -> Next {
        let shared = self.shared;
        let ts_us = shared.clock.now_us();
        let path = head.path_and_query();
        if let Some(p) = path {
            if p.split('?').next() == Some(shared.stats_path.as_str()) {
                return self.answer_stats(&head);
            }
        }
        let counters = &shared.counters;
        counters.proxied.fetch_add(1, Ordering::Relaxed);

        let head_bytes = &self.inbuf[..head.head_len];
        let mut capture = Capture::new(shared, path, head_bytes, ts_us);

        let outcome = self.forward(&head, &mut capture, ts_us);
        match outcome {
            Outcome::Done { reuse } => {
                if reuse && head.keep_alive {
                    Next::KeepOpen
                } else {
                    self.upstream = None;
                    Next::Close
                }
            }
            Outcome::Abort => {
                self.upstream = None;
                Next::Close
            }
            Outcome::Fail(status, message) => {
                self.upstream = None;
                counters.upstream_errors.fetch_add(1, Ordering::Relaxed);
                let reason = if status == 504 {
                    "Gateway Timeout"
                } else {
                    "Bad Gateway"
                };
                let body = format!(
                    "hairline record: upstream {}: {message}\n",
                    shared.upstream_url
                );
                let shown = if head.method.eq_ignore_ascii_case("HEAD") {
                    ""
                } else {
                    body.as_str()
                };
                let _ = self.client.write_all(
                    format!(
                        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{shown}",
                        body.len()
                    )
                    .as_bytes(),
                );
                Next::Close
            }
        }
    }

    fn connect_upstream(&mut self) -> io::Result<()> {
        let shared = self.shared;
        let stream = TcpStream::connect_timeout(&shared.upstream, shared.connect_timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(POLL_STEP))?;
        stream.set_write_timeout(Some(shared.upstream_timeout))?;
        self.upstream = Some(Upstream {
            stream,
            served: 0,
            idle_since: Instant::now(),
        });
        Ok(())
    }

    /// Sends `bytes` as the start of a request, on the kept connection or a new one.
    fn send_first(&mut self, bytes: &[u8]) -> Result<(), Outcome> {
        if self
            .upstream
            .as_ref()
            .is_some_and(Upstream::closed_while_idle)
        {
            self.upstream = None;
        }
        if self.upstream.is_none() {
            if let Err(e) = self.connect_upstream() {
                return Err(Outcome::Fail(502, connect_message(&e)));
            }
        }
        let Some(up) = self.upstream.as_mut() else {
            return Err(Outcome::Fail(502, "not connected"));
        };
        match up.stream.write_all(bytes) {
            Ok(()) => Ok(()),
            Err(_) if up.served > 0 => {
                // The kept connection was closed by the upstream while idle: once more on a
                // fresh one.
                self.upstream = None;
                if let Err(e) = self.connect_upstream() {
                    return Err(Outcome::Fail(502, connect_message(&e)));
                }
                let Some(up) = self.upstream.as_mut() else {
                    return Err(Outcome::Fail(502, "not connected"));
                };
                up.stream
                    .write_all(bytes)
                    .map_err(|_| Outcome::Fail(502, "the connection failed while sending"))
            }
            Err(_) => Err(Outcome::Fail(502, "the connection failed while sending")),
        }
    }

    fn forward(&mut self, head: &RequestHead, capture: &mut Capture, ts_us: u64) -> Outcome {
        let shared = self.shared;
        let limit = shared.max_body_bytes;
        let mut body = match head.body {
            BodyFraming::Length(n) => BodyLeft::Length(n),
            BodyFraming::Chunked => BodyLeft::Chunked(ChunkedDecoder::default()),
        };
        // The head and whatever body bytes came with it go out in one write.
        let (used, decoded) = match body.take(&self.inbuf[head.head_len..], capture.wanted()) {
            Ok(x) => x,
            Err(()) => {
                capture.lose(self.shared);
                return self.bad_body();
            }
        };
        let first_len = head.head_len + used;
        let raw = &self.inbuf[head.head_len..first_len];
        let decoded_ref = decoded.as_deref().unwrap_or(raw);
        capture.add(raw, decoded_ref, limit);
        let first = self.inbuf[..first_len].to_vec();
        self.inbuf.drain(..first_len);
        let body_complete = body.done();
        let sent = self.send_first(&first);
        let head_request = head.method.eq_ignore_ascii_case("HEAD");
        if body_complete {
            // Recorded even when the upstream fails: it is a real request all the same.
            capture.hand_over(self.shared, ts_us, head_request);
        }
        if let Err(outcome) = sent {
            if !body_complete {
                capture.lose(self.shared);
            }
            return outcome;
        }
        let retry_copy = (body_complete && first.len() <= RETRY_COPY_BYTES).then_some(first);
        let started = Instant::now();
        let mut tracker = ResponseTracker::new(&head.method);
        let mut early_response = false;
        if !body_complete {
            match self.stream_body(&mut body, capture, &mut tracker, started) {
                Ok(true) => capture.hand_over(self.shared, ts_us, head_request),
                // The upstream answered before the body was complete; the rest of the body
                // can no longer be delimited on this connection.
                Ok(false) => {
                    early_response = true;
                    capture.lose(self.shared);
                }
                Err(outcome) => {
                    capture.lose(self.shared);
                    return outcome;
                }
            }
        }
        match self.relay_response(&mut tracker, started, retry_copy) {
            Outcome::Done { reuse } => Outcome::Done {
                reuse: reuse && !early_response,
            },
            other => other,
        }
    }

    fn bad_body(&mut self) -> Outcome {
        self.refuse(&HeadError {
            status: 400,
            message: "malformed chunked request body",
        });
        Outcome::Abort
    }

    /// Streams the rest of the request body to the upstream while watching the upstream
    /// for an early answer (`100 Continue`, or a final response such as 413). Returns
    /// `Ok(true)` when the body is complete, `Ok(false)` when a final response started.
    fn stream_body(
        &mut self,
        body: &mut BodyLeft,
        capture: &mut Capture,
        tracker: &mut ResponseTracker,
        started: Instant,
    ) -> Result<bool, Outcome> {
        let shared = self.shared;
        let limit = shared.max_body_bytes;
        while !body.done() {
            if shared.abandon_now() {
                return Err(Outcome::Abort);
            }
            if started.elapsed() > shared.upstream_timeout {
                return Err(Outcome::Abort);
            }
            let Some(up) = self.upstream.as_mut() else {
                return Err(Outcome::Abort);
            };
            let (client_ready, upstream_ready) =
                wait_readable(self.client.as_raw_fd(), up.stream.as_raw_fd(), POLL_STEP);
            if upstream_ready {
                match up.stream.read(&mut self.scratch) {
                    Ok(0) | Err(_) => return Err(Outcome::Abort),
                    Ok(n) => {
                        if self.client.write_all(&self.scratch[..n]).is_err() {
                            return Err(Outcome::Abort);
                        }
                        match tracker.feed(&self.scratch[..n]) {
                            Ok(used) if used == n => {}
                            _ => return Err(Outcome::Abort),
                        }
                        if tracker.final_head().is_some() {
                            return Ok(false);
                        }
                    }
                }
            }
            if client_ready {
                let n = match self.client.read(&mut self.scratch) {
                    Ok(0) => return Err(Outcome::Abort),
                    Ok(n) => n,
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return Err(Outcome::Abort),
                };
                let (used, decoded) = match body.take(&self.scratch[..n], capture.wanted()) {
                    Ok(x) => x,
                    Err(()) => return Err(Outcome::Abort),
                };
                let raw = &self.scratch[..used];
                capture.add(raw, decoded.as_deref().unwrap_or(raw), limit);
                if up.stream.write_all(raw).is_err() {
                    return Err(Outcome::Abort);
                }
                // Bytes after the body belong to the next request.
                self.inbuf.extend_from_slice(&self.scratch[used..n]);
            }
        }
        Ok(true)
    }

    /// Forwards the response as it arrives until it is complete.
    fn relay_response(
        &mut self,
        tracker: &mut ResponseTracker,
        started: Instant,
        mut retry_copy: Option<Vec<u8>>,
    ) -> Outcome {
        let shared = self.shared;
        loop {
            if tracker.is_complete() {
                let Some(up) = self.upstream.as_mut() else {
                    return Outcome::Done { reuse: false };
                };
                up.served += 1;
                up.idle_since = Instant::now();
                return Outcome::Done {
                    reuse: tracker.keep_alive(),
                };
            }
            let Some(up) = self.upstream.as_mut() else {
                return Outcome::Abort;
            };
            let read = up.stream.read(&mut self.scratch);
            let failed = match read {
                Ok(0) => {
                    if tracker.finish_on_eof() {
                        self.upstream = None;
                        return Outcome::Done { reuse: false };
                    }
                    true
                }
                Ok(n) => {
                    if self.client.write_all(&self.scratch[..n]).is_err() {
                        return Outcome::Abort;
                    }
                    match tracker.feed(&self.scratch[..n]) {
                        Ok(used) if used == n => {}
                        // Unsolicited bytes after the response, or bytes that are not HTTP:
                        // this upstream connection cannot be trusted with another request.
                        Ok(_) => {
                            self.upstream = None;
                            return Outcome::Done { reuse: false };
                        }
                        Err(_) => return Outcome::Abort,
                    }
                    false
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                    if shared.abandon_now() {
                        return Outcome::Abort;
                    }
                    if started.elapsed() > shared.upstream_timeout {
                        if tracker.started() {
                            return Outcome::Abort;
                        }
                        return Outcome::Fail(504, "no response within --upstream-timeout-ms");
                    }
                    false
                }
                Err(_) => true,
            };
            if failed {
                if tracker.started() {
                    shared
                        .counters
                        .upstream_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Outcome::Abort;
                }
                let reused = self.upstream.as_ref().is_some_and(|u| u.served > 0);
                self.upstream = None;
                match retry_copy.take() {
                    Some(bytes) if reused => {
                        // A kept connection the upstream closed just as the request went out.
                        if let Err(outcome) = self.send_first(&bytes) {
                            return outcome;
                        }
                    }
                    _ => return Outcome::Fail(502, "the connection closed before a response"),
                }
            }
        }
    }

    fn answer_stats(&mut self, head: &RequestHead) -> Next {
        let body = self.shared.counters.snapshot().to_json() + "\n";
        // A body on a stats request is not read; closing keeps the stream in step.
        let close = !head.keep_alive || head.body != BodyFraming::Length(0);
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{}\r\n{}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
            if head.method.eq_ignore_ascii_case("HEAD") { "" } else { body.as_str() }
        );
        self.inbuf.drain(..head.head_len);
        if self.client.write_all(response.as_bytes()).is_err() || close {
            return Next::Close;
        }
        Next::KeepOpen
    }
}

/// Waits until one of two sockets is readable (or closed); returns which.
fn wait_readable(a: i32, b: i32, timeout: Duration) -> (bool, bool) {
    let mut fds = [
        libc::pollfd {
            fd: a,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if rc <= 0 {
        return (false, false);
    }
    let ready = |f: &libc::pollfd| f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    (ready(&fds[0]), ready(&fds[1]))
}
