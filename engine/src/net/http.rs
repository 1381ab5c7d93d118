//! HTTP/1.1 for every part of the engine: where a request head and body end, where a
//! response ends, and what an `http://` URL names. The load engine's client, the sample
//! service, the recorder's proxy and mirror, and the warm-up probe all frame messages here,
//! so that they agree on what a message is.
//!
//! Heads are parsed by `httparse`; bodies (Content-Length, chunked, until close) are
//! framed here. Nothing here does I/O: each piece is fed bytes and says how many it
//! consumed, so the same code serves the event loop, the blocking proxy and the property
//! tests.

use std::net::{SocketAddr, ToSocketAddrs};

/// An `http://` URL, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    pub addr: SocketAddr,
    /// `host` or `host:port` as written: the Host header of a request to it.
    pub authority: String,
    /// The path with its query, `/` when the URL has neither.
    pub path_and_query: String,
    pub has_query: bool,
    pub has_fragment: bool,
}

/// Parses and resolves an `http://` URL; the error says what is wrong, for the caller to
/// put after its flag.
pub fn parse_http_url(text: &str) -> Result<HttpUrl, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not supported, only http",
            url.scheme()
        ));
    }
    let host = url.host_str().ok_or("the URL has no host")?;
    let port = url.port_or_known_default().unwrap_or(80);
    let addr = (host.trim_start_matches('[').trim_end_matches(']'), port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host} ({e})"))?
        .next()
        .ok_or_else(|| format!("{host} resolves to no address"))?;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let mut path_and_query = url.path().to_owned();
    if let Some(q) = url.query() {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    Ok(HttpUrl {
        addr,
        authority,
        path_and_query,
        has_query: url.query().is_some(),
        has_fragment: url.fragment().is_some(),
    })
}

/// Largest request or response head accepted; more is refused rather than buffered.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Header lines accepted in one head.
pub const MAX_HEADERS: usize = 128;
/// Longest chunk-size or trailer line.
const MAX_CHUNK_LINE_BYTES: usize = 4096;

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// `Content-Length: n` (0 when the head has neither length nor chunked coding).
    Length(u64),
    Chunked,
}

/// What a request head says about framing and routing; the head itself stays where it is
/// (the recorder forwards it unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// The request target as sent: usually origin form, `/path?query`.
    pub target: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub body: BodyFraming,
    /// Whether the client expects the connection to stay open after the response.
    pub keep_alive: bool,
    /// `Expect: 100-continue`: the client may wait for an interim response before the body.
    pub expect_continue: bool,
    /// Bytes of the head, up to and including the blank line.
    pub head_len: usize,
    /// The `x-hairline-request-id` the load engine sends, which the sample service reads.
    pub request_id: Option<Vec<u8>>,
}

impl RequestHead {
    /// The path of the target without its query; `None` for targets that have no path
    /// (`*`, authority form, or an absolute URL that does not parse).
    pub fn path_and_query(&self) -> Option<&str> {
        path_and_query(&self.target)
    }
}

/// The origin-form part of a request target: `/p?q` as is, the path and query of an
/// absolute URL (`http://host/p?q`), `None` for anything else.
pub fn path_and_query(target: &str) -> Option<&str> {
    if target.starts_with('/') {
        return Some(target);
    }
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))?;
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => Some(&rest[i..]),
        // `http://host?q` and `http://host` both mean the root path.
        Some(_) | None => Some("/"),
    }
}

/// A request the proxy refuses to forward, with the status it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadError {
    pub status: u16,
    pub message: &'static str,
}

const fn bad(status: u16, message: &'static str) -> HeadError {
    HeadError { status, message }
}

/// Parses the request head at the start of `buf`: `Ok(None)` while it is incomplete.
pub fn parse_request_head(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(bad(431, "request head larger than 64 KiB"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(bad(431, "more than 128 request header lines"))
        }
        Err(_) => return Err(bad(400, "malformed HTTP request head")),
    };
    if head_len > MAX_HEAD_BYTES {
        return Err(bad(431, "request head larger than 64 KiB"));
    }
    // httparse sets method, path and version on a complete parse.
    let minor_version = req.version.unwrap_or(1);
    let mut keep_alive = minor_version >= 1;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut expect_continue = false;
    let mut request_id = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_decimal(h.value).ok_or(bad(400, "bad Content-Length"))?;
            // Differing lengths are how requests get smuggled past a proxy: refuse them.
            if length.is_some_and(|seen| seen != n) {
                return Err(bad(400, "conflicting Content-Length headers"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            if !trim(last).eq_ignore_ascii_case(b"chunked") {
                return Err(bad(
                    501,
                    "a request Transfer-Encoding must end with chunked",
                ));
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',').map(trim) {
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        } else if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = trim(h.value).eq_ignore_ascii_case(b"100-continue");
        } else if h.name.eq_ignore_ascii_case("x-hairline-request-id") {
            request_id = Some(h.value.to_vec());
        }
    }
    if chunked && length.is_some() {
        return Err(bad(400, "both Content-Length and Transfer-Encoding"));
    }
    let body = if chunked {
        BodyFraming::Chunked
    } else {
        BodyFraming::Length(length.unwrap_or(0))
    };
    Ok(Some(RequestHead {
        method: req.method.unwrap_or("GET").to_owned(),
        target: req.path.unwrap_or("/").to_owned(),
        minor_version,
        body,
        keep_alive,
        expect_continue,
        head_len,
        request_id,
    }))
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end.max(start)]
}

fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    let digits = trim(bytes);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

/// Incremental decoder of a chunked body. It reports how many input bytes belong to the
/// body, so that exactly those are forwarded, and optionally collects the decoded data.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// The part of a size or trailer line seen so far.
    line: Vec<u8>,
}

/// A chunked body that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadChunk(pub &'static str);

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            line: Vec::new(),
        }
    }
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes body bytes from the front of `input` and returns how many; stops at the end
    /// of the body. Decoded data is appended to `data` while it is `Some`.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut data: Option<&mut Vec<u8>>,
    ) -> Result<usize, BadChunk> {
        let mut pos = 0;
        while pos < input.len() {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Data(left) => {
                    let take = left.min((input.len() - pos) as u64) as usize;
                    if let Some(out) = data.as_deref_mut() {
                        out.extend_from_slice(&input[pos..pos + take]);
                    }
                    pos += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(line) = self.take_line(input, &mut pos)? else {
                        break;
                    };
                    self.state = match self.state {
                        ChunkState::Size => {
                            let size = parse_chunk_size(&line)?;
                            if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            }
                        }
                        ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                        ChunkState::DataEnd => {
                            return Err(BadChunk("chunk data longer than its size"))
                        }
                        // Trailer fields end with an empty line; they are forwarded, not kept.
                        _ if line.is_empty() => ChunkState::Done,
                        _ => ChunkState::Trailer,
                    };
                }
            }
        }
        Ok(pos)
    }

    /// The rest of a CRLF-terminated line, `None` while incomplete.
    fn take_line(&mut self, input: &[u8], pos: &mut usize) -> Result<Option<Vec<u8>>, BadChunk> {
        let rest = &input[*pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.line.extend_from_slice(&rest[..i]);
                *pos += i + 1;
                if self.line.len() > MAX_CHUNK_LINE_BYTES {
                    return Err(BadChunk("chunk line longer than 4 KiB"));
                }
                let mut line = std::mem::take(&mut self.line);
                if line.pop() != Some(b'\r') {
                    return Err(BadChunk("chunk line not ended by CRLF"));
                }
                Ok(Some(line))
            }
            None => {
                self.line.extend_from_slice(rest);
                *pos = input.len();
                if self.line.len() > MAX_CHUNK_LINE_BYTES {
                    return Err(BadChunk("chunk line longer than 4 KiB"));
                }
                Ok(None)
            }
        }
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, BadChunk> {
    let hex = trim(line.split(|&b| b == b';').next().unwrap_or(b""));
    if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(BadChunk("bad chunk size"));
    }
    // At most 15 hex digits, so the value fits in a u64.
    Ok(hex.iter().fold(0u64, |n, &b| {
        n * 16 + u64::from((b as char).to_digit(16).unwrap_or(0))
    }))
}

#[derive(Debug, Clone)]
enum ResponseState {
    Head,
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// Finds the end of one response in the bytes an upstream sends, without keeping the
/// body. Interim responses (`100 Continue`, `103 Early Hints`) are passed over.
#[derive(Debug, Clone)]
pub struct ResponseTracker {
    state: ResponseState,
    head: Vec<u8>,
    head_request: bool,
    /// Status and keep-alive of the final response, once its head is complete.
    final_head: Option<(u16, bool)>,
    /// Whether any response bytes were seen.
    started: bool,
}

/// A response that cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadResponse(pub &'static str);

impl ResponseTracker {
    /// A tracker for the response to a request with this method.
    pub fn new(method: &str) -> ResponseTracker {
        ResponseTracker::for_request(method.eq_ignore_ascii_case("HEAD"))
    }

    /// A tracker for the response to a `HEAD` request (no body) or any other.
    pub fn for_request(head_request: bool) -> ResponseTracker {
        ResponseTracker {
            state: ResponseState::Head,
            head: Vec::new(),
            head_request,
            final_head: None,
            started: false,
        }
    }

    pub fn is_complete(&self) -> bool {
        matches!(self.state, ResponseState::Done)
    }

    /// Whether any byte of a response was seen.
    pub fn started(&self) -> bool {
        self.started
    }

    /// `(status, keep_alive)` of the final response once its head is complete.
    pub fn final_head(&self) -> Option<(u16, bool)> {
        self.final_head
    }

    /// Whether the connection may carry another request after this response.
    pub fn keep_alive(&self) -> bool {
        self.final_head.is_some_and(|(_, k)| k) && self.is_complete()
    }

    /// The peer closed: completes a body delimited by the close.
    pub fn finish_on_eof(&mut self) -> bool {
        if matches!(self.state, ResponseState::UntilClose) {
            self.state = ResponseState::Done;
        }
        self.is_complete()
    }

    /// Consumes response bytes from the front of `input`, returning how many; bytes after
    /// the end of the response are left alone (an upstream should never send them).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, BadResponse> {
        if !input.is_empty() {
            self.started = true;
        }
        let mut pos = 0;
        while pos < input.len() {
            match &mut self.state {
                ResponseState::Done => break,
                ResponseState::Head => {
                    let before = self.head.len();
                    self.head.extend_from_slice(&input[pos..]);
                    let Some(head_len) = self.parse_head()? else {
                        pos = input.len();
                        break;
                    };
                    pos += head_len - before;
                    self.head.clear();
                }
                ResponseState::Length(left) => {
                    let take = (*left).min((input.len() - pos) as u64);
                    pos += take as usize;
                    *left -= take;
                    if *left == 0 {
                        self.state = ResponseState::Done;
                    }
                }
                ResponseState::Chunked(decoder) => {
                    pos += decoder
                        .feed(&input[pos..], None)
                        .map_err(|BadChunk(m)| BadResponse(m))?;
                    if decoder.is_done() {
                        self.state = ResponseState::Done;
                    }
                }
                ResponseState::UntilClose => pos = input.len(),
            }
        }
        Ok(pos)
    }

    /// Parses the buffered head; on success sets the body state and returns the head length.
    fn parse_head(&mut self) -> Result<Option<usize>, BadResponse> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let n = match resp.parse(&self.head) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if self.head.len() > MAX_HEAD_BYTES => {
                return Err(BadResponse("response head larger than 64 KiB"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(BadResponse("malformed response head")),
        };
        let status = resp.code.unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            // An interim response; the final one follows on the same connection.
            return Ok(Some(n));
        }
        let mut keep_alive = resp.version.unwrap_or(1) >= 1;
        let mut length = None;
        let mut chunked = false;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = parse_decimal(h.value).ok_or(BadResponse("bad Content-Length"))?;
                if length.is_some_and(|seen| seen != n) {
                    return Err(BadResponse("conflicting Content-Length headers"));
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
                chunked = trim(last).eq_ignore_ascii_case(b"chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',').map(trim) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    }
                }
            }
        }
        self.state = if self.head_request || status == 204 || status == 304 {
            ResponseState::Done
        } else if status == 101 {
            // A protocol switch is not HTTP any more; the recorder does not tunnel it.
            keep_alive = false;
            ResponseState::UntilClose
        } else if chunked {
            ResponseState::Chunked(ChunkedDecoder::default())
        } else if let Some(0) = length {
            ResponseState::Done
        } else if let Some(n) = length {
            ResponseState::Length(n)
        } else {
            keep_alive = false;
            ResponseState::UntilClose
        };
        self.final_head = Some((status, keep_alive));
        Ok(Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};

    fn head(raw: &[u8]) -> RequestHead {
        parse_request_head(raw)
            .expect("a valid head")
            .expect("a complete head")
    }

    #[test]
    fn a_head_gives_its_framing_and_keep_alive() {
        let raw = b"POST /api/search?q=a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let h = head(raw);
        assert_eq!(h.method, "POST");
        assert_eq!(h.target, "/api/search?q=a");
        assert_eq!(h.body, BodyFraming::Length(5));
        assert!(h.keep_alive);
        assert_eq!(h.head_len, raw.len() - 5);

        let h = head(b"GET / HTTP/1.0\r\n\r\n");
        assert!(!h.keep_alive);
        assert_eq!(h.body, BodyFraming::Length(0));
        let h = head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(h.keep_alive);
        let h = head(b"PUT /u HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n");
        assert_eq!(h.body, BodyFraming::Chunked);
        assert!(h.expect_continue && !h.keep_alive);
    }

    #[test]
    fn smuggling_shapes_and_oversized_heads_are_refused() {
        let status = |raw: &[u8]| parse_request_head(raw).err().map(|e| e.status);
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
            Some(501)
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            Some(400)
        );
        assert_eq!(status(b"GET /\x01 HTTP/1.1\r\n\r\n"), Some(400));
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD_BYTES + 10, b'a');
        assert_eq!(status(&long), Some(431));
        assert!(parse_request_head(b"GET / HTTP/1.1\r\nHost")
            .unwrap()
            .is_none());
    }

    #[test]
    fn targets_give_their_origin_form() {
        assert_eq!(path_and_query("/a?b"), Some("/a?b"));
        assert_eq!(path_and_query("http://h:1/a/b?c"), Some("/a/b?c"));
        assert_eq!(path_and_query("http://h:1?c"), Some("/"));
        assert_eq!(path_and_query("http://h"), Some("/"));
        assert_eq!(path_and_query("*"), None);
        assert_eq!(path_and_query("h:443"), None);
    }

    fn decode_all(pieces: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), BadChunk> {
        let mut d = ChunkedDecoder::default();
        let mut out = Vec::new();
        let mut used = 0;
        for p in pieces {
            used += d.feed(p, Some(&mut out))?;
        }
        Ok((out, used, d.is_done()))
    }

    #[test]
    fn chunked_bodies_decode_and_stop_at_their_end() {
        let body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\nGET /next";
        let (data, used, done) = decode_all(&[body]).unwrap();
        assert_eq!(data, b"Wikipedia");
        assert!(done);
        assert_eq!(&body[used..], b"GET /next");
        let (data, _, done) = decode_all(&[b"3\r\nab", b"c\r", b"\n0\r\n", b"\r\n"]).unwrap();
        assert_eq!((data.as_slice(), done), (&b"abc"[..], true));
        assert!(decode_all(&[b"zz\r\n"]).is_err());
        assert!(decode_all(&[b"2\r\nabc\r\n"]).is_err());
        assert!(decode_all(&[b"2\nab\r\n"]).is_err());
    }

    #[test]
    fn urls_name_an_address_a_host_and_a_path() {
        let u = parse_http_url("http://127.0.0.1:8080/base/x?q=1#f").unwrap();
        assert_eq!(u.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(u.authority, "127.0.0.1:8080");
        assert_eq!(u.path_and_query, "/base/x?q=1");
        assert!(u.has_query && u.has_fragment);
        let u = parse_http_url("http://[::1]").unwrap();
        assert_eq!((u.addr.port(), u.authority.as_str()), (80, "[::1]"));
        assert_eq!(u.path_and_query, "/");
        assert!(!u.has_query && !u.has_fragment);
        for (bad, why) in [
            ("127.0.0.1:80", "not a URL"),
            ("https://127.0.0.1", "only http"),
            ("ftp://127.0.0.1", "scheme \"ftp\""),
            ("not a url", "not a URL"),
        ] {
            let err = parse_http_url(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn responses_end_where_their_framing_says() {
        let mut t = ResponseTracker::new("GET");
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(t.feed(&raw[..30]).unwrap(), 30);
        assert!(t.final_head().is_none());
        assert_eq!(t.feed(&raw[30..]).unwrap(), raw.len() - 30);
        assert!(t.is_complete() && t.keep_alive());
        assert_eq!(t.final_head(), Some((200, true)));

        let mut t = ResponseTracker::new("HEAD");
        t.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
            .unwrap();
        assert!(t.is_complete());

        let mut t = ResponseTracker::new("GET");
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n";
        assert_eq!(t.feed(raw).unwrap(), raw.len());
        assert!(t.is_complete());

        let mut t = ResponseTracker::new("GET");
        t.feed(b"HTTP/1.0 200 OK\r\n\r\nsome body").unwrap();
        assert!(!t.is_complete());
        assert!(t.finish_on_eof() && !t.keep_alive());

        let mut t = ResponseTracker::new("GET");
        assert!(t.feed(b"SPDY/3 nonsense\r\n\r\n").is_err());
    }

    /// Feeds `raw` in pieces of `piece` bytes, as reads would bring it; `(status, bytes,
    /// keep_alive)` once the response is complete (at the end of the input, for a body
    /// delimited by the close).
    fn response_in_pieces(
        raw: &[u8],
        piece: usize,
        head_request: bool,
    ) -> Result<Option<(u16, u64, bool)>, BadResponse> {
        let mut t = ResponseTracker::for_request(head_request);
        let mut bytes = 0u64;
        for chunk in raw.chunks(piece) {
            let used = t.feed(chunk)?;
            bytes += used as u64;
            if t.is_complete() {
                assert_eq!(used, chunk.len(), "the response ends where its input does");
                break;
            }
        }
        t.finish_on_eof();
        Ok(t.final_head()
            .filter(|_| t.is_complete())
            .map(|(status, _)| (status, bytes, t.keep_alive())))
    }

    #[test]
    fn a_content_length_body_ends_in_any_split() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        for piece in [1, 3, 7, raw.len()] {
            assert_eq!(
                response_in_pieces(raw, piece, false),
                Ok(Some((200, raw.len() as u64, true)))
            );
        }
    }

    #[test]
    fn a_chunked_body_with_extension_and_trailer_ends_in_any_split() {
        let raw = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n";
        for piece in [1, 2, 5, raw.len()] {
            assert_eq!(
                response_in_pieces(raw, piece, false),
                Ok(Some((503, raw.len() as u64, true)))
            );
        }
    }

    #[test]
    fn interim_responses_are_passed_over_and_bodiless_ones_end_at_their_head() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        let r = response_in_pieces(raw, 4, false).unwrap().unwrap();
        assert_eq!((r.0, r.1), (204, raw.len() as u64));
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
        assert_eq!(
            response_in_pieces(head, 100, true),
            Ok(Some((200, head.len() as u64, true)))
        );
    }

    #[test]
    fn a_body_delimited_by_the_close_and_connection_close_end_the_connection() {
        let raw = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(
            response_in_pieces(raw, 4, false),
            Ok(Some((200, raw.len() as u64, false)))
        );
        let raw = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            response_in_pieces(raw, 64, false),
            Ok(Some((200, raw.len() as u64, false)))
        );
    }

    #[test]
    fn garbage_is_a_bad_response() {
        assert!(response_in_pieces(b"SSH-2.0-OpenSSH\r\n\r\n", 64, false).is_err());
        let bad_length = b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n";
        assert!(response_in_pieces(bad_length, 64, false).is_err());
        let bad_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(response_in_pieces(bad_chunk, 64, false).is_err());
    }

    /// A fixed seed and a small case count: a short, repeatable run in every `cargo test`.
    fn config() -> Config {
        Config {
            cases: 256,
            rng_seed: RngSeed::Fixed(0x5eed_4ec0),
            failure_persistence: None,
            ..Config::default()
        }
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn request_heads_never_panic_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_request_head(&bytes);
        }

        #[test]
        fn generated_requests_parse_to_what_was_written_at_any_split(
            method in "[A-Z]{1,7}",
            path in "/[a-z0-9/._~%-]{0,30}(\\?[a-z0-9=&]{0,20})?",
            headers in prop::collection::vec((token(), "[ -~]{0,20}"), 0..8),
            body_len in 0u64..100_000,
            split in 0usize..400,
        ) {
            let mut raw = format!("{method} {path} HTTP/1.1\r\n");
            for (name, value) in &headers {
                // Framing headers are the generator's to write.
                let lower = name.to_ascii_lowercase();
                if ["content-length", "transfer-encoding", "connection", "expect"].contains(&lower.as_str()) {
                    continue;
                }
                raw.push_str(&format!("{name}: {}\r\n", value.trim()));
            }
            raw.push_str(&format!("Content-Length: {body_len}\r\n\r\n"));
            let raw = raw.into_bytes();
            let h = parse_request_head(&raw).unwrap().unwrap();
            prop_assert_eq!(&h.method, &method);
            prop_assert_eq!(&h.target, &path);
            prop_assert_eq!(h.body, BodyFraming::Length(body_len));
            prop_assert_eq!(h.head_len, raw.len());
            prop_assert!(h.keep_alive);
            let cut = split.min(raw.len() - 1);
            prop_assert_eq!(parse_request_head(&raw[..cut]), Ok(None));
        }

        #[test]
        fn chunked_bodies_round_trip_in_any_pieces(
            data in prop::collection::vec(any::<u8>(), 0..2000),
            chunk_sizes in prop::collection::vec(1usize..300, 1..20),
            cuts in prop::collection::vec(0usize..3000, 0..6),
        ) {
            let mut encoded = Vec::new();
            let mut rest = data.as_slice();
            let mut sizes = chunk_sizes.iter().cycle();
            while !rest.is_empty() {
                let n = (*sizes.next().unwrap_or(&1)).min(rest.len());
                encoded.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                encoded.extend_from_slice(&rest[..n]);
                encoded.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            encoded.extend_from_slice(b"0\r\n\r\n");
            let body_len = encoded.len();
            encoded.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(encoded.len())).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for c in cuts.into_iter().chain([encoded.len()]) {
                pieces.push(&encoded[start..c]);
                start = c;
            }
            let (decoded, used, done) = decode_all(&pieces).unwrap();
            prop_assert!(done);
            prop_assert_eq!(used, body_len);
            prop_assert_eq!(decoded, data);
        }

        #[test]
        fn chunk_decoder_and_response_tracker_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = ChunkedDecoder::default().feed(&bytes, Some(&mut Vec::new()));
            let mut t = ResponseTracker::new("GET");
            if let Ok(n) = t.feed(&bytes) {
                prop_assert!(n <= bytes.len());
            }
        }
    }
}
