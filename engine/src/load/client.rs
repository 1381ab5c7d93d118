//! One keep-alive HTTP/1.1 client connection of the load engine.
//!
//! The event loop in `replay` owns the connections; this module reads and writes them,
//! and leaves where a response ends to `http::ResponseTracker`, the framing the recorder
//! uses too. Bodies are counted, never stored.

use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::TcpStream;

use crate::format::request_log::ErrorKind;
use crate::net::http::ResponseTracker;

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Bytes received, head and body.
    pub bytes: u64,
    /// Whether the connection can carry another request.
    pub keep_alive: bool,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    Closed,
    Connecting,
    Idle,
    Busy,
}

/// What a read produced.
#[derive(Debug)]
pub enum ReadOutcome {
    /// Nothing complete yet.
    Pending,
    Complete(Response),
    /// The connection failed or closed before the response completed.
    Failed {
        kind: ErrorKind,
        bytes_seen: u64,
    },
    /// An idle connection was closed by the peer; no request was affected.
    IdleClosed,
}

/// One keep-alive connection.
#[derive(Debug)]
pub struct Conn {
    pub stream: Option<TcpStream>,
    pub state: ConnState,
    pub out: Vec<u8>,
    pub out_pos: usize,
    /// Where the response to the request in flight ends.
    pub tracker: ResponseTracker,
    /// Bytes of that response read so far.
    pub response_bytes: u64,
    /// Responses this connection has completed since it was opened.
    pub served: u64,
    pub deadline_ns: u64,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            stream: None,
            state: ConnState::Closed,
            out: Vec::with_capacity(1024),
            out_pos: 0,
            tracker: ResponseTracker::for_request(false),
            response_bytes: 0,
            served: 0,
            deadline_ns: 0,
        }
    }
}

/// Maps a connect failure to its error kind.
pub fn connect_error_kind(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
        io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
        _ => ErrorKind::ConnectError,
    }
}

fn io_error_kind(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => ErrorKind::Reset,
        io::ErrorKind::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Closed,
    }
}

impl Conn {
    /// Starts a non-blocking connect.
    pub fn open(&mut self, addr: SocketAddr) -> io::Result<()> {
        let stream = TcpStream::connect(addr)?;
        // Small requests must leave at once, not wait for Nagle's timer.
        stream.set_nodelay(true)?;
        self.stream = Some(stream);
        self.state = ConnState::Connecting;
        self.out.clear();
        self.out_pos = 0;
        self.served = 0;
        Ok(())
    }

    /// Whether a pending connect has finished: `Ok(true)` connected, `Ok(false)` not yet.
    pub fn check_connected(&mut self) -> Result<bool, io::Error> {
        let Some(stream) = self.stream.as_ref() else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "no socket"));
        };
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
        match stream.peer_addr() {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes as much of `out` as the socket takes; `Ok(true)` when all of it is written.
    pub fn flush(&mut self) -> io::Result<bool> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "no socket"));
        };
        while self.out_pos < self.out.len() {
            match stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed")),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Gets ready to read the response to a request just written.
    pub fn expect_response(&mut self, head_request: bool) {
        self.tracker = ResponseTracker::for_request(head_request);
        self.response_bytes = 0;
    }

    pub fn write_error_kind(e: &io::Error) -> ErrorKind {
        match io_error_kind(e) {
            ErrorKind::Closed => ErrorKind::WriteError,
            k => k,
        }
    }

    /// Reads until the socket would block, feeding the tracker. `scratch` is a reusable
    /// buffer.
    pub fn read(&mut self, scratch: &mut [u8]) -> ReadOutcome {
        let Some(stream) = self.stream.as_mut() else {
            return ReadOutcome::Failed {
                kind: ErrorKind::Closed,
                bytes_seen: 0,
            };
        };
        loop {
            match stream.read(scratch) {
                Ok(0) => {
                    if self.state != ConnState::Busy {
                        return ReadOutcome::IdleClosed;
                    }
                    self.tracker.finish_on_eof();
                    return match complete(&self.tracker, self.response_bytes) {
                        Some(r) => ReadOutcome::Complete(r),
                        None => ReadOutcome::Failed {
                            kind: ErrorKind::Closed,
                            bytes_seen: self.response_bytes,
                        },
                    };
                }
                Ok(n) => {
                    if self.state != ConnState::Busy {
                        // Bytes nobody asked for: the connection is out of step; drop it.
                        return ReadOutcome::Failed {
                            kind: ErrorKind::BadResponse,
                            bytes_seen: n as u64,
                        };
                    }
                    let Ok(used) = self.tracker.feed(&scratch[..n]) else {
                        return bad();
                    };
                    self.response_bytes += used as u64;
                    if let Some(r) = complete(&self.tracker, self.response_bytes) {
                        // Bytes after the end of the response: a second answer to one request.
                        return if used < n {
                            bad()
                        } else {
                            ReadOutcome::Complete(r)
                        };
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadOutcome::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if self.state != ConnState::Busy {
                        return ReadOutcome::IdleClosed;
                    }
                    return ReadOutcome::Failed {
                        kind: io_error_kind(&e),
                        bytes_seen: self.response_bytes,
                    };
                }
            }
        }
    }
}

/// The response `tracker` has read (`bytes` of it), once it is complete.
fn complete(tracker: &ResponseTracker, bytes: u64) -> Option<Response> {
    let (status, _) = tracker.final_head()?;
    tracker.is_complete().then_some(Response {
        status,
        bytes,
        keep_alive: tracker.keep_alive(),
    })
}

fn bad() -> ReadOutcome {
    ReadOutcome::Failed {
        kind: ErrorKind::BadResponse,
        bytes_seen: 0,
    }
}
