//! A sampled request becomes a trace line (docs/trace-format.md): its method, path, label,
//! end-to-end headers, body and ordering key, or nothing when it cannot be replayed.

use std::sync::Arc;

use base64::Engine as _;
use serde::Serialize;

use crate::format::trace::header_problem;
use crate::net::http::{path_and_query, MAX_HEADERS};
use crate::record::label::Labeler;
use crate::record::sample::Slot;

/// Headers that describe one hop, not the request, and are never recorded (RFC 9110 7.6.1),
/// plus those the trace format says the engine writes itself.
pub const UNRECORDED_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "host",
    "content-length",
    "x-hairline-request-id",
];

/// One request chosen for the trace, as the proxy thread copied it.
#[derive(Debug)]
pub struct Sample {
    /// Arrival time, Unix epoch µs.
    pub ts_us: u64,
    /// The request head as received, blank line included.
    pub head: Vec<u8>,
    /// The request body, de-chunked.
    pub body: Vec<u8>,
    /// The endpoint label when the sampler needed it already.
    pub label: Option<String>,
    pub slot: Option<Slot>,
}

impl Sample {
    /// Bytes this sample holds, for the queue's byte bound.
    pub fn size(&self) -> usize {
        self.head.len() + self.body.len() + 64
    }
}

/// Where the ordering key of a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    None,
    Header(String),
    Cookie(String),
}

/// What turns samples into lines, shared by the writer and the tests.
#[derive(Debug, Clone)]
pub struct LineFormat {
    pub labeler: Arc<Labeler>,
    pub key: KeySource,
    /// Extra header names (lowercase) never recorded (`--drop-header`).
    pub drop_headers: Vec<String>,
}

#[derive(Serialize)]
struct Line<'a> {
    method: &'a str,
    path: &'a str,
    headers: Vec<(&'a str, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_b64: Option<String>,
    endpoint: &'a str,
    ts_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

impl LineFormat {
    #[cfg(test)]
    fn line(&self, sample: &Sample) -> Option<String> {
        self.entry(sample).map(|(line, _)| line)
    }

    /// The trace line of a sample (newline included) and its endpoint label, or `None` when
    /// the request cannot be written in the trace format (a target with no path, a path
    /// that is not UTF-8).
    pub fn entry(&self, sample: &Sample) -> Option<(String, String)> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        // The proxy parsed this head already; a failure here would be a bug, not input.
        let Ok(httparse::Status::Complete(_)) = req.parse(&sample.head) else {
            return None;
        };
        let method = req.method?;
        let path = path_and_query(req.path?)?;
        if !path.bytes().all(|b| b > b' ' && b != 0x7f) {
            return None;
        }
        // Headers named in Connection are hop-by-hop too (RFC 9110 7.6.1).
        let mut hop: Vec<String> = Vec::new();
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("connection") {
                hop.extend(
                    String::from_utf8_lossy(h.value)
                        .split(',')
                        .map(|t| t.trim().to_ascii_lowercase())
                        .filter(|t| !t.is_empty()),
                );
            }
        }
        let key = match &self.key {
            KeySource::None => None,
            KeySource::Header(name) => req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).trim().to_owned()),
            KeySource::Cookie(name) => req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
                .find_map(|h| cookie_value(&String::from_utf8_lossy(h.value), name)),
        }
        .filter(|k| !k.is_empty());
        let recorded = |name: &str| {
            let lower = name.to_ascii_lowercase();
            !UNRECORDED_HEADERS.contains(&lower.as_str())
                && !hop.contains(&lower)
                && !self.drop_headers.contains(&lower)
        };
        let headers: Vec<(&str, String)> = req
            .headers
            .iter()
            .filter(|h| recorded(h.name))
            // Values that are not UTF-8 (obs-text) cannot be JSON strings; the replacement
            // character keeps the line readable.
            .map(|h| (h.name, String::from_utf8_lossy(h.value).into_owned()))
            .collect();
        // The trace's own rule for headers, which the engine applies when it reads them.
        // httparse lets no other control character through today; a line the engine
        // would refuse is dropped and counted all the same, never written.
        if headers
            .iter()
            .any(|(name, value)| header_problem(name, value).is_some())
        {
            return None;
        }
        let endpoint = match &sample.label {
            Some(l) => l.clone(),
            None => self.labeler.label(path),
        };
        let line = Line {
            method,
            path,
            headers,
            body_b64: (!sample.body.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(&sample.body)),
            endpoint: &endpoint,
            ts_us: sample.ts_us,
            key,
        };
        let mut text = serde_json::to_string(&line).ok()?;
        text.push('\n');
        Some((text, endpoint))
    }
}

/// The value of cookie `name` in a `Cookie` header value, if present.
pub fn cookie_value(header: &str, name: &str) -> Option<String> {
    header.split(';').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::trace::Trace;
    use crate::record::label::parse_label_rule;
    use std::path::Path;

    fn format(key: KeySource) -> LineFormat {
        LineFormat {
            labeler: Arc::new(Labeler::new(
                vec![parse_label_rule(r"^/api/(\w+)$=api-$1").unwrap()],
                false,
            )),
            key,
            drop_headers: vec!["authorization".into()],
        }
    }

    fn sample(head: &str, body: &[u8]) -> Sample {
        Sample {
            ts_us: 1_700_000_000_000_001,
            head: head.as_bytes().to_vec(),
            body: body.to_vec(),
            label: None,
            slot: None,
        }
    }

    #[test]
    fn a_line_keeps_end_to_end_headers_body_label_and_key() {
        let f = format(KeySource::Cookie("session".into()));
        let line = f
            .line(&sample(
                "POST /api/search?q=a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nAuthorization: secret\r\nCookie: a=1; session=\"u-7\"\r\nX-Tenant: 7\r\nX-Tenant: 8\r\nX-Hairline-Request-Id: 3\r\n\r\n",
                b"hi",
            ))
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["method"], "POST");
        assert_eq!(v["path"], "/api/search?q=a");
        assert_eq!(v["endpoint"], "api-search");
        assert_eq!(v["body_b64"], "aGk=");
        assert_eq!(v["key"], "u-7");
        assert_eq!(v["ts_us"], 1_700_000_000_000_001u64);
        assert_eq!(
            v["headers"],
            serde_json::json!([
                ["Cookie", "a=1; session=\"u-7\""],
                ["X-Tenant", "7"],
                ["X-Tenant", "8"]
            ])
        );
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
    }

    #[test]
    fn keys_come_from_a_header_and_targets_without_a_path_are_not_recorded() {
        let f = format(KeySource::Header("x-user".into()));
        let line = f
            .line(&sample(
                "GET http://h:1/p?x=1 HTTP/1.1\r\nX-User:  42 \r\n\r\n",
                b"",
            ))
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["key"], "42");
        assert_eq!(v["path"], "/p?x=1");
        assert_eq!(v["endpoint"], "/p");
        assert!(v.get("body_b64").is_none());
        assert!(f.line(&sample("OPTIONS * HTTP/1.1\r\n\r\n", b"")).is_none());
        assert_eq!(cookie_value("a=1;b = 2", "b").as_deref(), Some("2"));
        assert_eq!(cookie_value("ab=1", "b"), None);
    }

    #[test]
    fn lines_are_read_back_by_the_engines_trace_reader() {
        let f = format(KeySource::Header("x-user".into()));
        let mut text = String::from("{\"hairline_trace\": 1, \"source\": \"record\"}\n");
        text += &f
            .line(&sample(
                "PUT /api/feed HTTP/1.1\r\nX-User: 9\r\nX-Bin: café\r\n\r\n",
                &[0, 159, 255],
            ))
            .unwrap();
        text += &f.line(&sample("GET /x/y?z HTTP/1.0\r\n\r\n", b"")).unwrap();
        let trace = Trace::parse(&text, Path::new("rec.jsonl")).unwrap();
        let a = &trace.requests[0];
        assert_eq!(
            (a.method.as_str(), a.endpoint.as_str()),
            ("PUT", "api-feed")
        );
        assert_eq!(a.body, vec![0, 159, 255]);
        assert_eq!(a.key.as_deref(), Some("9"));
        assert_eq!(
            a.headers,
            vec![
                ("X-User".into(), "9".into()),
                ("X-Bin".into(), "café".into())
            ]
        );
        assert_eq!(trace.requests[1].endpoint, "/x/y");
    }
}
