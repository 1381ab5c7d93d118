//! The JSONL trace format (docs/trace-format.md is its definition).
//!
//! Line 1 is a header object `{"hairline_trace": 1, ...}`; every later non-empty line is
//! one request. Parsing stops at nothing: it reports the first bad line with its number and
//! field, because a trace is usually machine-written and one bad line means a bad writer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Map, Value};

/// The trace format version this engine reads.
pub const TRACE_VERSION: u64 = 1;
/// Distinct endpoint labels a replayed trace may have: request records index them with a
/// u16. Every tool that writes traces keeps within it.
pub const MAX_ENDPOINTS: usize = u16::MAX as usize;

const REQUEST_FIELDS: &[&str] = &[
    "method", "path", "headers", "body_b64", "endpoint", "ts_us", "key", "id", "meta",
];

/// One recorded request.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    pub method: String,
    /// Path with query, as sent on the request line.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Label that groups requests in the per-endpoint statistics.
    pub endpoint: String,
    /// Recorded timestamp (µs, any origin), for `--pace recorded`.
    pub ts_us: Option<u64>,
    /// Ordering key for `--pace ordered`.
    pub key: Option<String>,
}

/// A parsed trace: the requests in file order.
#[derive(Debug, Clone)]
pub struct Trace {
    pub requests: Vec<TraceRequest>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {field}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
    #[error("{path}: the trace has no requests; add one JSON object per line after the header")]
    Empty { path: PathBuf },
}

impl Trace {
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
        Trace::parse(&text, path)
    }

    /// Parses trace text; `path` is used in error messages only.
    pub fn parse(text: &str, path: &Path) -> Result<Trace, TraceError> {
        let bad = |line: usize, field: &str, message: String| TraceError::Line {
            path: path.to_owned(),
            line,
            field: field.to_owned(),
            message,
        };
        let mut requests = Vec::new();
        let mut seen_header = false;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(line)
                .map_err(|e| bad(line_no, "json", format!("not valid JSON ({e})")))?;
            let Value::Object(obj) = value else {
                return Err(bad(line_no, "json", "expected a JSON object".into()));
            };
            if !seen_header {
                check_header(&obj).map_err(|(field, msg)| bad(line_no, field, msg))?;
                seen_header = true;
                continue;
            }
            let request = parse_request(&obj).map_err(|(field, msg)| bad(line_no, &field, msg))?;
            requests.push(request);
        }
        if !seen_header {
            return Err(bad(
                1,
                "hairline_trace",
                "missing header line; the first line must be {\"hairline_trace\": 1}".into(),
            ));
        }
        if requests.is_empty() {
            return Err(TraceError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(Trace { requests })
    }

    /// Distinct endpoint labels in first-seen order, and each request's endpoint index.
    pub fn endpoints(&self) -> (Vec<String>, Vec<u16>) {
        let mut names: Vec<String> = Vec::new();
        let mut index: HashMap<&str, u16> = HashMap::new();
        let mut of_request = Vec::with_capacity(self.requests.len());
        for r in &self.requests {
            let next = names.len() as u16;
            let e = *index.entry(r.endpoint.as_str()).or_insert_with(|| {
                names.push(r.endpoint.clone());
                next
            });
            of_request.push(e);
        }
        (names, of_request)
    }

    /// Each request's ordering key as a dense id (requests without a key get their own).
    pub fn key_ids(&self) -> (Vec<u32>, usize) {
        let mut ids: HashMap<&str, u32> = HashMap::new();
        let mut next: u32 = 0;
        let mut out = Vec::with_capacity(self.requests.len());
        for r in &self.requests {
            let id = match &r.key {
                Some(k) => *ids.entry(k.as_str()).or_insert_with(|| {
                    next += 1;
                    next - 1
                }),
                None => {
                    next += 1;
                    next - 1
                }
            };
            out.push(id);
        }
        (out, next as usize)
    }
}

fn check_header(obj: &Map<String, Value>) -> Result<(), (&'static str, String)> {
    match obj.get("hairline_trace") {
        Some(Value::Number(n)) if n.as_u64() == Some(TRACE_VERSION) => Ok(()),
        Some(other) => Err((
            "hairline_trace",
            format!("unsupported trace version {other}; this engine reads version {TRACE_VERSION}"),
        )),
        None => Err((
            "hairline_trace",
            "the first line must be the header {\"hairline_trace\": 1, ...}".into(),
        )),
    }
}

fn parse_request(obj: &Map<String, Value>) -> Result<TraceRequest, (String, String)> {
    let err = |field: &str, msg: &str| (field.to_owned(), msg.to_owned());
    if let Some(unknown) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
        return Err((
            unknown.clone(),
            format!(
                "unknown field; the fields are {}",
                REQUEST_FIELDS.join(", ")
            ),
        ));
    }
    let method = match obj.get("method") {
        None => "GET".to_owned(),
        Some(Value::String(m)) if !m.is_empty() && m.bytes().all(is_token_byte) => m.clone(),
        Some(_) => return Err(err("method", "expected an HTTP method such as \"GET\"")),
    };
    let path = match obj.get("path") {
        Some(Value::String(p))
            if p.starts_with('/') && p.bytes().all(|b| b > b' ' && b != 0x7f) =>
        {
            p.clone()
        }
        Some(Value::String(_)) => {
            return Err(err(
                "path",
                "expected a path starting with '/' without spaces or control characters, \
                 e.g. \"/api/feed?user=1\" (percent-encode spaces)",
            ))
        }
        Some(_) => {
            return Err(err(
                "path",
                "expected a string such as \"/api/feed?user=1\"",
            ))
        }
        None => {
            return Err(err(
                "path",
                "missing; every request needs a path with its query",
            ))
        }
    };
    let headers = match obj.get("headers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => {
            let mut out = Vec::with_capacity(map.len());
            for (name, value) in map {
                let Value::String(v) = value else {
                    return Err(err("headers", "header values must be strings"));
                };
                out.push(check_header_pair(name, v)?);
            }
            out
        }
        Some(Value::Array(pairs)) => {
            let mut out = Vec::with_capacity(pairs.len());
            for pair in pairs {
                match pair.as_array().map(Vec::as_slice) {
                    Some([Value::String(n), Value::String(v)]) => {
                        out.push(check_header_pair(n, v)?)
                    }
                    _ => {
                        return Err(err(
                            "headers",
                            "expected an object or a list of [name, value] string pairs",
                        ))
                    }
                }
            }
            out
        }
        Some(_) => {
            return Err(err(
                "headers",
                "expected an object or a list of [name, value] string pairs",
            ))
        }
    };
    let body = match obj.get("body_b64") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| err("body_b64", &format!("not valid standard base64 ({e})")))?,
        Some(_) => return Err(err("body_b64", "expected a base64 string")),
    };
    let endpoint = match obj.get("endpoint") {
        None | Some(Value::Null) => path.split('?').next().unwrap_or(&path).to_owned(),
        Some(Value::String(e)) if !e.is_empty() => e.clone(),
        Some(_) => return Err(err("endpoint", "expected a non-empty string label")),
    };
    let ts_us = match obj.get("ts_us") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(t) => Some(t),
            None => {
                return Err(err(
                    "ts_us",
                    "expected a non-negative integer (microseconds)",
                ));
            }
        },
        Some(_) => {
            return Err(err(
                "ts_us",
                "expected a non-negative integer (microseconds)",
            ))
        }
    };
    let key = match obj.get("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => return Err(err("key", "expected a string or an integer")),
    };
    Ok(TraceRequest {
        method,
        path,
        headers,
        body,
        endpoint,
        ts_us,
        key,
    })
}

fn check_header_pair(name: &str, value: &str) -> Result<(String, String), (String, String)> {
    header_problem(name, value).map_or_else(
        || Ok((name.to_owned(), value.to_owned())),
        |why| Err(("headers".to_owned(), why)),
    )
}

/// What keeps a header from going on the wire as it is (`None` when it can): one rule for
/// every trace reader and writer, the recorder included.
pub fn header_problem(name: &str, value: &str) -> Option<String> {
    if name.is_empty() || !name.bytes().all(is_token_byte) {
        return Some(format!("invalid header name {name:?}; {TOKEN_RULE}"));
    }
    if !is_header_value(value) {
        return Some(format!(
            "header {name:?} has a control character in its value; only tab is allowed"
        ));
    }
    None
}

/// What a header name may be, for messages.
pub const TOKEN_RULE: &str = "a name is a token: letters, digits and !#$%&'*+-.^_`|~";

/// Whether a header value can go on the wire as it is: no control character but HTAB
/// (RFC 9110 `field-value`), so no CR, LF or NUL either. Non-ASCII text is sent as its
/// UTF-8 bytes.
pub fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= b' ' && b != 0x7f))
}

/// RFC 9110 `tchar`.
pub fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace, TraceError> {
        Trace::parse(text, Path::new("t.jsonl"))
    }

    #[test]
    fn reads_a_good_trace() {
        let text = r#"{"hairline_trace": 1, "source": "test"}
{"method": "POST", "path": "/api/search?q=a", "headers": {"x-shard": "3"}, "body_b64": "aGk=", "endpoint": "search", "ts_us": 10, "key": "u1"}

{"path": "/api/feed?user=2", "headers": [["accept", "*/*"]], "key": 7}
"#;
        let t = parse(text).expect("good trace");
        assert_eq!(t.requests.len(), 2);
        let a = &t.requests[0];
        assert_eq!(a.method, "POST");
        assert_eq!(a.body, b"hi");
        assert_eq!(a.headers, vec![("x-shard".to_owned(), "3".to_owned())]);
        assert_eq!(a.ts_us, Some(10));
        let b = &t.requests[1];
        assert_eq!(b.method, "GET");
        assert_eq!(b.endpoint, "/api/feed");
        assert_eq!(b.key.as_deref(), Some("7"));
        let (names, idx) = t.endpoints();
        assert_eq!(names, vec!["search", "/api/feed"]);
        assert_eq!(idx, vec![0, 1]);
    }

    fn line_error(text: &str) -> (usize, String) {
        match parse(text) {
            Err(TraceError::Line { line, field, .. }) => (line, field),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn bad_lines_name_line_and_field() {
        let h = "{\"hairline_trace\": 1}\n";
        assert_eq!(
            line_error(&format!(
                "{h}{{\"path\": \"/a\"}}\n{{\"method\": \"GET\"}}\n"
            )),
            (3, "path".into())
        );
        assert_eq!(
            line_error(&format!("{h}{{\"path\": \"/a\", \"body_b64\": \"%%%\"}}")),
            (2, "body_b64".into())
        );
        assert_eq!(
            line_error(&format!("{h}{{\"path\": \"/a\", \"ts_us\": -4}}")),
            (2, "ts_us".into())
        );
        assert_eq!(
            line_error(&format!(
                "{h}{{\"path\": \"/a\", \"headers\": {{\"bad name\": \"v\"}}}}"
            )),
            (2, "headers".into())
        );
        assert_eq!(
            line_error(&format!("{h}{{\"path\": \"/a\", \"heders\": {{}}}}")),
            (2, "heders".into())
        );
        assert_eq!(
            line_error(&format!("{h}{{\"path\": \"no-slash\"}}")),
            (2, "path".into())
        );
        assert_eq!(line_error(&format!("{h}not json")), (2, "json".into()));
        assert_eq!(
            line_error("{\"path\": \"/a\"}\n"),
            (1, "hairline_trace".into())
        );
        assert_eq!(
            line_error("{\"hairline_trace\": 2}\n{\"path\": \"/a\"}"),
            (1, "hairline_trace".into())
        );
    }

    #[test]
    fn header_names_are_tokens_and_values_have_no_control_characters_but_tab() {
        assert_eq!(header_problem("X_Tenant-id", "a\tb café \u{85}"), None);
        let name = header_problem("x tenant", "7").expect("a space is no token");
        assert!(name.contains("a token") && name.contains('_'), "{name}");
        for value in [
            "a\u{1}b",
            "a\rb",
            "a\nb",
            "a\u{0}b",
            "a\u{7f}b",
            "\u{1b}[31m",
        ] {
            let why = header_problem("x", value).expect("refused");
            assert!(why.contains("control character"), "{why}");
        }
        let h = "{\"hairline_trace\": 1}\n";
        assert_eq!(
            line_error(&format!(
                "{h}{{\"path\": \"/a\", \"headers\": [[\"x\", \"a\\u0001b\"]]}}"
            )),
            (2, "headers".into())
        );
    }

    #[test]
    fn empty_trace_is_an_error() {
        assert!(matches!(
            parse("{\"hairline_trace\": 1}\n"),
            Err(TraceError::Empty { .. })
        ));
    }

    #[test]
    fn keys_are_dense_and_keyless_requests_are_independent() {
        let text = "{\"hairline_trace\": 1}\n{\"path\":\"/a\",\"key\":\"x\"}\n{\"path\":\"/b\"}\n{\"path\":\"/c\",\"key\":\"x\"}\n";
        let t = parse(text).expect("good trace");
        let (ids, n) = t.key_ids();
        assert_eq!(ids, vec![0, 1, 0]);
        assert_eq!(n, 2);
    }
}
