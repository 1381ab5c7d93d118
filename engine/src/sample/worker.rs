//! One worker thread of the sample service: its own mio loop over the connections the
//! acceptor hands it, each connection's requests read (pipelined ones too), answered by
//! `handler` inline, and written back.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Once};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::net::http::{parse_request_head, BodyFraming};
use crate::net::listen::SHUTDOWN_POLL;
use crate::net::recv_stamp::{self, Arrival};
use crate::sample::cache::{tighten_timer_slack, CacheClient};
use crate::sample::handler::{write_response, Response, Shared, WorkKind, WorkerState};
use crate::sample::log::RequestLog;
use crate::sample::metrics::{Route, Status};
use crate::sample::ops::Ops;

/// Request bodies are read and ignored; larger ones are refused (413).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// Close once the output is flushed (client asked, or the stream is unusable).
    closing: bool,
    writable_interest: bool,
    /// When the oldest unanswered bytes of `input` arrived; a request's queueing starts here.
    arrival: Arrival,
    /// When the latest read's bytes arrived.
    last_arrival: Arrival,
}

enum Step {
    Keep,
    Close,
}

impl Connection {
    fn on_event(&mut self, state: &mut WorkerState) -> Step {
        let mut chunk = [0u8; 16 * 1024];
        let mut peer_closed = false;
        if !self.closing {
            loop {
                match recv_stamp::recv(self.stream.as_raw_fd(), &mut chunk) {
                    Ok((0, _)) => {
                        peer_closed = true;
                        break;
                    }
                    Ok((n, arrival)) => {
                        if self.input.is_empty() {
                            self.arrival = arrival;
                        }
                        self.last_arrival = arrival;
                        self.input.extend_from_slice(&chunk[..n]);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return Step::Close,
                }
            }
            self.serve_buffered(state);
        }
        if self.flush().is_err() {
            return Step::Close;
        }
        let drained = self.written == self.output.len();
        if drained {
            self.output.clear();
            self.written = 0;
        }
        if (self.closing || peer_closed) && drained {
            Step::Close
        } else {
            Step::Keep
        }
    }

    /// Answers every complete request in the input (pipelining included).
    fn serve_buffered(&mut self, state: &mut WorkerState) {
        while !self.closing {
            match parse_request_head(&self.input) {
                Ok(None) => return,
                Err(e) => {
                    let status = if e.status == 431 {
                        Status::HeaderTooLarge
                    } else {
                        Status::BadRequest
                    };
                    self.refuse(state, status, &format!("{}\n", e.message));
                    return;
                }
                Ok(Some(head)) => {
                    // No client of the sample service sends a chunked body.
                    let BodyFraming::Length(length) = head.body else {
                        self.refuse(
                            state,
                            Status::BadRequest,
                            "Transfer-Encoding is not supported; send a Content-Length\n",
                        );
                        return;
                    };
                    let content_length = usize::try_from(length).unwrap_or(usize::MAX);
                    if content_length > MAX_BODY_BYTES {
                        self.refuse(state, Status::PayloadTooLarge, "request body too large\n");
                        return;
                    }
                    let total = head.head_len + content_length;
                    if self.input.len() < total {
                        return;
                    }
                    let (route, response) = state.handle(&head, self.arrival);
                    state.shared.metrics.count(route, response.status);
                    write_response(
                        &mut self.output,
                        &response,
                        head.method == "HEAD",
                        head.keep_alive,
                    );
                    self.input.drain(..total);
                    // A pipelined request behind this one arrived with the latest read at the
                    // earliest that is known.
                    self.arrival = self.last_arrival;
                    if !head.keep_alive {
                        self.closing = true;
                    }
                }
            }
        }
    }

    fn refuse(&mut self, state: &WorkerState, status: Status, message: &str) {
        state.shared.metrics.count(Route::Other, status);
        write_response(
            &mut self.output,
            &Response::text(status, message),
            false,
            false,
        );
        self.input.clear();
        self.closing = true;
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.written < self.output.len() {
            match self.stream.write(&self.output[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

pub(super) const WAKER: Token = Token(usize::MAX);

/// Asks the kernel to timestamp a connection's received bytes. A refusal is said once on
/// stderr, not per connection: the requests it affects are counted in
/// `sample_queue_unstamped_total` either way, and a kernel that refuses one socket refuses
/// them all.
fn enable_stamps(stream: &TcpStream) {
    static REFUSED: Once = Once::new();
    if let Err(e) = recv_stamp::enable(stream.as_raw_fd()) {
        REFUSED.call_once(|| {
            eprintln!(
                "hairline-engine sample-service: the kernel refused SO_TIMESTAMPNS ({e}); queue \
                 times start at the read and the requests are counted in \
                 sample_queue_unstamped_total"
            );
        });
    }
}

pub(super) fn worker_loop(
    mut poll: Poll,
    incoming: Receiver<TcpStream>,
    shared: Arc<Shared>,
    shutdown: Arc<AtomicBool>,
) -> io::Result<()> {
    let mut events = Events::with_capacity(256);
    let mut connections: HashMap<usize, Connection> = HashMap::new();
    let mut next_token = 0usize;
    if shared.settings.work == WorkKind::Sleep {
        tighten_timer_slack();
    }
    let cache = shared.settings.cache.map(CacheClient::new);
    let log = shared
        .settings
        .log
        .map(|(batch, codec)| RequestLog::new(batch, codec));
    let code_cache = shared.ops.as_ref().and_then(Ops::worker_cache);
    let mut state = WorkerState {
        shared,
        retained: VecDeque::new(),
        cache,
        log,
        code_cache,
    };
    while !shutdown.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(SHUTDOWN_POLL)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for event in events.iter() {
            if event.token() == WAKER {
                while let Ok(mut stream) = incoming.try_recv() {
                    // Without it, queue times start at the read (said in docs/engine.md);
                    // `--test-no-recv-timestamps` leaves it off to run that path on purpose.
                    if state.shared.settings.recv_timestamps {
                        enable_stamps(&stream);
                    }
                    let token = next_token;
                    next_token = next_token.wrapping_add(1) % (usize::MAX - 1);
                    if poll
                        .registry()
                        .register(&mut stream, Token(token), Interest::READABLE)
                        .is_ok()
                    {
                        connections.insert(
                            token,
                            Connection {
                                stream,
                                input: Vec::new(),
                                output: Vec::new(),
                                written: 0,
                                closing: false,
                                writable_interest: false,
                                arrival: Arrival::default(),
                                last_arrival: Arrival::default(),
                            },
                        );
                    }
                }
                continue;
            }
            let token = event.token().0;
            let Some(conn) = connections.get_mut(&token) else {
                continue;
            };
            match conn.on_event(&mut state) {
                Step::Close => {
                    if let Some(mut conn) = connections.remove(&token) {
                        let _ = poll.registry().deregister(&mut conn.stream);
                    }
                }
                Step::Keep => {
                    // Edge-triggered: ask for writability only while output is pending.
                    let want_write = conn.written < conn.output.len();
                    if want_write != conn.writable_interest {
                        let interest = if want_write {
                            Interest::READABLE | Interest::WRITABLE
                        } else {
                            Interest::READABLE
                        };
                        if poll
                            .registry()
                            .reregister(&mut conn.stream, Token(token), interest)
                            .is_ok()
                        {
                            conn.writable_interest = want_write;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_head_is_parsed_with_its_request_id_and_keep_alive() {
        let raw = b"GET /api/feed?user=7 HTTP/1.1\r\nHost: x\r\nX-Hairline-Request-Id: r1\r\n\r\n";
        let head = parse_request_head(raw).unwrap().unwrap();
        assert_eq!(head.target, "/api/feed?user=7");
        assert_eq!(head.request_id.as_deref(), Some(&b"r1"[..]));
        assert!(head.keep_alive);
        assert_eq!(head.head_len, raw.len());
    }

    #[test]
    fn a_partial_head_waits_and_http10_closes() {
        assert!(parse_request_head(b"GET / HTTP/1.1\r\nHost")
            .unwrap()
            .is_none());
        let head = parse_request_head(b"GET / HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!head.keep_alive);
    }
}
