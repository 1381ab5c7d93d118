//! HTTP/1.1 client pieces: an incremental response parser and one keep-alive connection.
//!
//! The event loop in `replay.rs` owns the connections; this module knows how bytes become a
//! response and nothing about scheduling. Bodies are counted, never stored.

use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::TcpStream;

use crate::request_log::ErrorKind;

const MAX_HEADERS: usize = 96;
/// A response head larger than this is rejected rather than buffered without bound.
const MAX_HEAD_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Bytes received, head and body.
    pub bytes: u64,
    /// Whether the connection can carry another request.
    pub keep_alive: bool,
}

/// Incremental parser of one response; `reset` before the next request.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    head: Option<(u16, bool)>,
    body: Body,
    bytes: u64,
    head_request: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadResponse(pub String);

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser {
            head: None,
            body: Body::Length(0),
            bytes: 0,
            head_request: false,
        }
    }
}

impl ResponseParser {
    pub fn reset(&mut self, head_request: bool) {
        *self = ResponseParser {
            head_request,
            ..ResponseParser::default()
        };
    }

    /// Bytes of this response seen so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Consumes what it can from the front of `buf`; returns the response once complete.
    pub fn feed(&mut self, buf: &mut Vec<u8>) -> Result<Option<Response>, BadResponse> {
        let mut pos = 0;
        let result = self.feed_at(buf, &mut pos);
        self.bytes += pos as u64;
        buf.drain(..pos);
        result
    }

    /// The peer closed the connection: completes a body delimited by the close.
    pub fn finish_on_eof(&mut self) -> Option<Response> {
        match (self.head, self.body) {
            (Some((status, _)), Body::UntilClose) => Some(Response {
                status,
                bytes: self.bytes,
                keep_alive: false,
            }),
            _ => None,
        }
    }

    fn feed_at(&mut self, buf: &[u8], pos: &mut usize) -> Result<Option<Response>, BadResponse> {
        loop {
            if self.head.is_none() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut resp = httparse::Response::new(&mut headers);
                let n = match resp.parse(&buf[*pos..]) {
                    Ok(httparse::Status::Complete(n)) => n,
                    Ok(httparse::Status::Partial) => {
                        if buf.len() - *pos > MAX_HEAD_BYTES {
                            return Err(BadResponse("response head larger than 64 KiB".into()));
                        }
                        return Ok(None);
                    }
                    Err(e) => return Err(BadResponse(format!("unparseable response head: {e}"))),
                };
                // httparse sets both on a complete parse.
                let status = resp.code.unwrap_or(0);
                let version = resp.version.unwrap_or(1);
                *pos += n;
                if (100..200).contains(&status) && status != 101 {
                    // Interim response (100 Continue, 103 Early Hints): the real one follows.
                    continue;
                }
                let mut keep_alive = version == 1;
                let mut length: Option<u64> = None;
                let mut chunked = false;
                for h in resp.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        let text = std::str::from_utf8(h.value).unwrap_or("").trim();
                        length =
                            Some(text.parse().map_err(|_| {
                                BadResponse(format!("bad Content-Length {text:?}"))
                            })?);
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        let text = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                        chunked = text.rsplit(',').next().map(str::trim) == Some("chunked");
                    } else if h.name.eq_ignore_ascii_case("connection") {
                        let text = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                        if text.contains("close") {
                            keep_alive = false;
                        } else if text.contains("keep-alive") {
                            keep_alive = true;
                        }
                    }
                }
                let no_body = self.head_request || status == 204 || status == 304;
                self.body = if no_body {
                    Body::Length(0)
                } else if chunked {
                    Body::Chunked(Chunk::Size)
                } else if let Some(n) = length {
                    Body::Length(n)
                } else {
                    keep_alive = false;
                    Body::UntilClose
                };
                self.head = Some((status, keep_alive));
            }
            let Some((status, keep_alive)) = self.head else {
                return Ok(None);
            };
            let done = |bytes: u64| {
                Some(Response {
                    status,
                    bytes,
                    keep_alive,
                })
            };
            let avail = (buf.len() - *pos) as u64;
            match self.body {
                Body::Length(left) => {
                    let take = left.min(avail);
                    *pos += take as usize;
                    self.body = Body::Length(left - take);
                    if left == take {
                        return Ok(done(self.bytes + *pos as u64));
                    }
                    return Ok(None);
                }
                Body::UntilClose => {
                    *pos = buf.len();
                    return Ok(None);
                }
                Body::Chunked(Chunk::Data(left)) => {
                    let take = left.min(avail);
                    *pos += take as usize;
                    if take < left {
                        self.body = Body::Chunked(Chunk::Data(left - take));
                        return Ok(None);
                    }
                    self.body = Body::Chunked(Chunk::DataEnd);
                }
                Body::Chunked(Chunk::DataEnd) => {
                    if avail < 2 {
                        return Ok(None);
                    }
                    if &buf[*pos..*pos + 2] != b"\r\n" {
                        return Err(BadResponse("chunk data not followed by CRLF".into()));
                    }
                    *pos += 2;
                    self.body = Body::Chunked(Chunk::Size);
                }
                Body::Chunked(Chunk::Size) => {
                    let Some(line) = take_line(buf, pos)? else {
                        return Ok(None);
                    };
                    let hex = line.split(|&b| b == b';').next().unwrap_or(b"");
                    let hex = std::str::from_utf8(hex).unwrap_or("").trim();
                    let size = u64::from_str_radix(hex, 16)
                        .map_err(|_| BadResponse(format!("bad chunk size {hex:?}")))?;
                    self.body = if size == 0 {
                        Body::Chunked(Chunk::Trailer)
                    } else {
                        Body::Chunked(Chunk::Data(size))
                    };
                }
                Body::Chunked(Chunk::Trailer) => {
                    let Some(line) = take_line(buf, pos)? else {
                        return Ok(None);
                    };
                    if line.is_empty() {
                        return Ok(done(self.bytes + *pos as u64));
                    }
                }
            }
        }
    }
}

/// The next CRLF-terminated line from `pos`, advancing past it; `None` when incomplete.
fn take_line<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>, BadResponse> {
    let rest = &buf[*pos..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(i) => {
            *pos += i + 2;
            Ok(Some(&rest[..i]))
        }
        None if rest.len() > 4096 => Err(BadResponse("chunk line longer than 4 KiB".into())),
        None => Ok(None),
    }
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
    pub inbuf: Vec<u8>,
    pub parser: ResponseParser,
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
            inbuf: Vec::with_capacity(16 * 1024),
            parser: ResponseParser::default(),
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
        self.inbuf.clear();
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

    pub fn write_error_kind(e: &io::Error) -> ErrorKind {
        match io_error_kind(e) {
            ErrorKind::Closed => ErrorKind::WriteError,
            k => k,
        }
    }

    /// Reads until the socket would block, feeding the parser. `scratch` is a reusable buffer.
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
                    if let Err(e) = self.parser.feed(&mut self.inbuf) {
                        return bad(e);
                    }
                    return match self.parser.finish_on_eof() {
                        Some(r) => ReadOutcome::Complete(r),
                        None => ReadOutcome::Failed {
                            kind: ErrorKind::Closed,
                            bytes_seen: self.parser.bytes() + self.inbuf.len() as u64,
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
                    self.inbuf.extend_from_slice(&scratch[..n]);
                    match self.parser.feed(&mut self.inbuf) {
                        Ok(Some(r)) => {
                            if !self.inbuf.is_empty() {
                                return bad(BadResponse(
                                    "bytes after the end of the response".into(),
                                ));
                            }
                            return ReadOutcome::Complete(r);
                        }
                        Ok(None) => {}
                        Err(e) => return bad(e),
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
                        bytes_seen: self.parser.bytes() + self.inbuf.len() as u64,
                    };
                }
            }
        }
    }
}

fn bad(_e: BadResponse) -> ReadOutcome {
    ReadOutcome::Failed {
        kind: ErrorKind::BadResponse,
        bytes_seen: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(
        raw: &[u8],
        piece: usize,
        head_request: bool,
    ) -> Result<Option<Response>, BadResponse> {
        let mut p = ResponseParser::default();
        p.reset(head_request);
        let mut buf = Vec::new();
        for chunk in raw.chunks(piece) {
            buf.extend_from_slice(chunk);
            if let Some(r) = p.feed(&mut buf)? {
                assert!(buf.is_empty());
                return Ok(Some(r));
            }
        }
        Ok(p.finish_on_eof())
    }

    #[test]
    fn content_length_body_in_any_split() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        for piece in [1, 3, 7, raw.len()] {
            let r = parse_in_pieces(raw, piece, false)
                .expect("valid")
                .expect("complete");
            assert_eq!(
                r,
                Response {
                    status: 200,
                    bytes: raw.len() as u64,
                    keep_alive: true
                }
            );
        }
    }

    #[test]
    fn chunked_body_with_extension_and_trailer() {
        let raw = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n";
        for piece in [1, 2, 5, raw.len()] {
            let r = parse_in_pieces(raw, piece, false)
                .expect("valid")
                .expect("complete");
            assert_eq!(r.status, 503);
            assert_eq!(r.bytes, raw.len() as u64);
        }
    }

    #[test]
    fn interim_responses_and_bodiless_statuses() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        let r = parse_in_pieces(raw, 4, false)
            .expect("valid")
            .expect("complete");
        assert_eq!(r.status, 204);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
        let r = parse_in_pieces(head, 100, true)
            .expect("valid")
            .expect("complete");
        assert_eq!(r.status, 200);
    }

    #[test]
    fn close_delimited_and_connection_close() {
        let raw = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        let r = parse_in_pieces(raw, 4, false)
            .expect("valid")
            .expect("complete on eof");
        assert!(!r.keep_alive);
        assert_eq!(r.bytes, raw.len() as u64);
        let raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        let r = parse_in_pieces(raw, 64, false)
            .expect("valid")
            .expect("complete");
        assert!(!r.keep_alive);
    }

    #[test]
    fn garbage_is_a_bad_response() {
        assert!(parse_in_pieces(b"SSH-2.0-OpenSSH\r\n\r\n", 64, false).is_err());
        assert!(
            parse_in_pieces(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 64, false).is_err()
        );
        assert!(parse_in_pieces(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            64,
            false
        )
        .is_err());
    }
}
