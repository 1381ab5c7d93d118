//! The writer thread: samples become trace lines (docs/trace-format.md), written whole.
//!
//! It is the only thread that touches the output file, and the proxy threads reach it only
//! through a bounded queue they never wait on, so a slow disk shows up as dropped samples,
//! never as latency. Lines are written in batches that always end at a line end: whatever
//! stops the process between two writes, the file holds whole lines.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::Serialize;

use super::label::Labeler;
use super::sample::{Offer, Reservoirs, Slot};
use super::Shared;
use crate::format::trace::{header_problem, MAX_ENDPOINTS};
use crate::net::http::{path_and_query, MAX_HEADERS};

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

/// How long after an interval ends its reservoir stays open for samples still on their way
/// from the proxy threads.
const CLOSE_GRACE_US: u64 = 100_000;
/// Longest the writer waits for a sample before looking at the clock and the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// A batch is written once it holds this many bytes (or the queue is empty).
const BATCH_BYTES: usize = 256 * 1024;

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

/// The endpoint labels of the lines written so far, which may not outgrow what the engine
/// replays ([`MAX_ENDPOINTS`]): a trace from the recorder must never stop a run.
#[derive(Debug)]
pub struct LabelBudget {
    seen: HashSet<String>,
    max: usize,
}

impl LabelBudget {
    pub fn new(max: usize) -> LabelBudget {
        LabelBudget {
            seen: HashSet::new(),
            max,
        }
    }

    /// Whether a line with this label may be written: its label is in the trace already,
    /// or there is room for one more.
    pub fn admit(&mut self, label: &str) -> bool {
        if self.seen.contains(label) {
            return true;
        }
        if self.seen.len() >= self.max {
            return false;
        }
        self.seen.insert(label.to_owned());
        true
    }
}

impl Default for LabelBudget {
    fn default() -> Self {
        LabelBudget::new(MAX_ENDPOINTS)
    }
}

/// What the writer thread owns.
pub struct Writer {
    pub shared: Arc<Shared>,
    pub rx: Receiver<Sample>,
    pub out: File,
    pub format: LineFormat,
    /// `(K, T in µs)` in reservoir mode.
    pub reservoir: Option<(u32, u64)>,
    pub per_endpoint: bool,
    /// Bytes of the file known to end at a line end (the header included).
    pub whole_bytes: u64,
    pub labels: LabelBudget,
    /// Whether stderr was told that the label budget is spent.
    pub labels_full_told: bool,
}

struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

impl Writer {
    pub fn run(mut self) {
        let mut reservoirs: Option<Reservoirs<Sample>> =
            self.reservoir.map(|(k, t)| Reservoirs::new(k, t));
        let mut batch = Batch {
            bytes: Vec::with_capacity(BATCH_BYTES),
            lines: 0,
        };
        let mut write_failed = false;
        loop {
            let draining = self.shared.draining.load(Ordering::Acquire);
            match self.rx.recv_timeout(IDLE_WAIT) {
                Ok(sample) => self.take(sample, reservoirs.as_mut(), &mut batch),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {}
            }
            while batch.bytes.len() < BATCH_BYTES {
                match self.rx.try_recv() {
                    Ok(sample) => self.take(sample, reservoirs.as_mut(), &mut batch),
                    Err(_) => break,
                }
            }
            if let Some(res) = reservoirs.as_mut() {
                let now_us = self.shared.clock.now_us();
                let interval_us = res.interval_us();
                if let Some(oldest) = res.oldest_open() {
                    let due = now_us.saturating_sub(CLOSE_GRACE_US) / interval_us;
                    // Interval `i` closes once `(i + 1) * T + grace` has passed.
                    if due > oldest {
                        let closed = res.close_through(due - 1);
                        self.add_closed(closed, &mut batch);
                    }
                }
            }
            let finished = draining && self.rx.is_empty();
            if finished {
                if let Some(res) = reservoirs.as_mut() {
                    let closed = res.close_all();
                    self.add_closed(closed, &mut batch);
                }
            }
            if !batch.bytes.is_empty() {
                self.write(&mut batch, &mut write_failed);
            }
            if finished {
                // Durable, not only visible; an error here (a pipe) changes nothing.
                let _ = self.out.sync_data();
                break;
            }
        }
        self.shared.writer_done.store(true, Ordering::Release);
    }

    fn take(
        &mut self,
        sample: Sample,
        reservoirs: Option<&mut Reservoirs<Sample>>,
        batch: &mut Batch,
    ) {
        let counters = &self.shared.counters;
        self.shared
            .queued_bytes
            .fetch_sub(sample.size(), Ordering::Relaxed);
        match (sample.slot, reservoirs) {
            (Some(slot), Some(res)) => {
                let key = if self.per_endpoint {
                    sample.label.clone().unwrap_or_default()
                } else {
                    String::new()
                };
                if let Offer::Late(_) = res.offer(slot, &key, sample) {
                    counters.sampled.fetch_add(1, Ordering::Relaxed);
                    counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => self.append(&sample, batch),
        }
    }

    fn add_closed(&mut self, mut closed: Vec<Sample>, batch: &mut Batch) {
        self.shared
            .counters
            .sampled
            .fetch_add(closed.len() as u64, Ordering::Relaxed);
        closed.sort_by_key(|s| s.ts_us);
        for sample in &closed {
            self.append(sample, batch);
        }
    }

    fn append(&mut self, sample: &Sample, batch: &mut Batch) {
        match self.format.entry(sample) {
            Some((line, label)) if self.labels.admit(&label) => {
                batch.bytes.extend_from_slice(line.as_bytes());
                batch.lines += 1;
            }
            Some(_) => {
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                if !self.labels_full_told {
                    eprintln!(
                        "hairline-engine record: the trace has {MAX_ENDPOINTS} endpoint labels, \
                         as many as the engine replays; requests with a new label are dropped \
                         (label fewer: --normalize-ids, --label REGEX=NAME)"
                    );
                    self.labels_full_told = true;
                }
            }
            None => {
                self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn write(&mut self, batch: &mut Batch, write_failed: &mut bool) {
        let counters = &self.shared.counters;
        match self.out.write_all(&batch.bytes) {
            Ok(()) => {
                counters.written.fetch_add(batch.lines, Ordering::Relaxed);
                self.whole_bytes += batch.bytes.len() as u64;
            }
            Err(e) => {
                counters.dropped.fetch_add(batch.lines, Ordering::Relaxed);
                // Part of the batch may have been written (a disk that filled up): cut the
                // file back to its last whole line. A pipe cannot be cut; nothing to do.
                if self.out.set_len(self.whole_bytes).is_ok() {
                    let _ = self.out.seek(SeekFrom::Start(self.whole_bytes));
                }
                if !*write_failed {
                    eprintln!("hairline-engine record: cannot write the trace ({e}); dropping samples until writes succeed");
                    *write_failed = true;
                }
            }
        }
        batch.bytes.clear();
        batch.lines = 0;
    }
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
    fn the_label_budget_admits_known_labels_once_it_is_spent() {
        let mut budget = LabelBudget::new(2);
        assert!(budget.admit("/a") && budget.admit("/b") && budget.admit("/a"));
        assert!(!budget.admit("/c"));
        assert!(budget.admit("/b"));
        assert_eq!(LabelBudget::default().max, MAX_ENDPOINTS);
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
