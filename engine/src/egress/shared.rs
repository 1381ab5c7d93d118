//! What every connection thread of the egress proxy shares: the upstream, the policy, the
//! counts the stats file reports, and the stop flag.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::egress::config::HttpPolicy;

/// Longest wait for an upstream connection: an unreachable one is a quick 502, never a hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Distinct `METHOD /path` keys counted per map; the rest share `METHOD (other paths)`, so
/// that ids in paths cannot grow the stats without bound.
const MAX_KEYS: usize = 1000;

/// Requests counted per `METHOD /path`.
#[derive(Debug, Default)]
pub struct Counts(Mutex<BTreeMap<String, u64>>);

impl Counts {
    pub fn add(&self, method: &str, path: &str) {
        let Ok(mut map) = self.0.lock() else {
            return;
        };
        let key = format!("{method} {path}");
        if map.len() >= MAX_KEYS && !map.contains_key(&key) {
            *map.entry(format!("{method} (other paths)")).or_insert(0) += 1;
        } else {
            *map.entry(key).or_insert(0) += 1;
        }
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// What the stats file reports.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub forwarded: Counts,
    pub dropped: Counts,
}

impl Stats {
    pub fn to_json(&self, http: bool) -> Value {
        let mut out = Map::new();
        out.insert(
            "connections".into(),
            json!(self.connections.load(Ordering::Relaxed)),
        );
        out.insert(
            "upstream_errors".into(),
            json!(self.upstream_errors.load(Ordering::Relaxed)),
        );
        if http {
            out.insert("forwarded".into(), json!(self.forwarded.snapshot()));
            out.insert("dropped".into(), json!(self.dropped.snapshot()));
        }
        Value::Object(out)
    }
}

/// What every connection thread shares.
pub(crate) struct Shared {
    pub(super) upstream: SocketAddr,
    pub(super) http: Option<HttpPolicy>,
    pub(super) stats: Stats,
    pub(super) stop: Arc<AtomicBool>,
}

impl Shared {
    pub(super) fn connect_upstream(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&self.upstream, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}
