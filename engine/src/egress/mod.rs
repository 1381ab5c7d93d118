//! `hairline-engine egress`: the proxy between a service under test and one downstream
//! service, so that a test never writes to production (ServiceLab §3.1, §5.3).
//!
//! Without `--http` it relays TCP both ways. With `--http` it reads each request and
//! forwards only those its `--forward` rules name (by default GET and HEAD); every other
//! request is answered here with a synthetic response and never reaches the upstream. The
//! counts per `METHOD /path` go to the `--stats` file, rewritten whole every 0.5 s and at
//! exit, which is how the lab reports the side effects it prevented.
//!
//! With `--netns` the listening socket is made inside that network namespace (on a thread
//! that enters it and ends), while upstream connections are made from the namespace the
//! process started in: a loopback upstream is the host's loopback, not the namespace's.
//!
//! A thread per connection: these are a service's calls to its dependencies, not the load.
//!
//! Exit codes: 0 stopped by SIGINT/SIGTERM with the stats written, 2 bad flags or a failure
//! to start (nothing listens then).

mod conn;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::format::output::{path_problem, Staged};
use crate::net::sockets::wait_readable;

/// How often the stats file is rewritten.
const STATS_EVERY: Duration = Duration::from_millis(500);
/// Longest wait for an upstream connection: an unreachable one is a quick 502, never a hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Stack of a connection thread: its buffers are on the heap.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;
/// Distinct `METHOD /path` keys counted per map; the rest share `METHOD (other paths)`, so
/// that ids in paths cannot grow the stats without bound.
const MAX_KEYS: usize = 1000;

/// Proxy a service's calls to one downstream, forwarding reads and answering writes itself.
#[derive(clap::Args, Debug, Clone)]
pub struct EgressArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free one); stdout's one line is
    /// `ready HOST:PORT` once it listens.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// The downstream service, HOST:PORT, connected from the namespace the proxy started in.
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream: String,
    /// Listen inside this network namespace (e.g. /run/netns/NAME).
    #[arg(long, value_name = "FILE")]
    pub netns: Option<PathBuf>,
    /// Parse HTTP/1.1 requests: forward the `--forward` ones, answer the others here.
    #[arg(long)]
    pub http: bool,
    /// A method (GET) or one endpoint ("POST /v1/lookup"; a path ending in * is a prefix)
    /// to forward; repeat for several. Default: GET and HEAD.
    #[arg(long = "forward", value_name = "RULE", requires = "http")]
    pub forward: Vec<String>,
    /// Forward nothing: every request gets the synthetic response.
    #[arg(long, requires = "http", conflicts_with = "forward")]
    pub forward_none: bool,
    /// Status of the synthetic response to a request that is not forwarded.
    #[arg(long, value_name = "STATUS", default_value_t = 200, requires = "http")]
    pub drop_status: u16,
    /// Body of the synthetic response.
    #[arg(long, value_name = "TEXT", default_value = "{}", requires = "http")]
    pub drop_body: String,
    /// Content-Type of the synthetic response.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "application/json",
        requires = "http"
    )]
    pub drop_content_type: String,
    /// The counters as JSON, rewritten atomically every 0.5 s and at exit.
    #[arg(long, value_name = "FILE")]
    pub stats: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error("--netns {path}: cannot enter the namespace ({source}); create it with `ip netns add`, and run as root")]
    Netns { path: PathBuf, source: io::Error },
    #[error("--listen {addr}: cannot listen ({source}); pick a free port, or 0 for any")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("--stats {path}: cannot write ({source})")]
    Stats { path: PathBuf, source: io::Error },
    #[error("cannot start the egress proxy: {0}")]
    Io(#[from] io::Error),
}

/// A forwarding rule: a method, or a method and a path (exact, or a prefix ending in `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRule {
    method: String,
    path: Option<String>,
}

impl ForwardRule {
    /// `"GET"` or `"POST /v1/lookup"`; the error says what to write instead.
    pub fn parse(text: &str) -> Result<ForwardRule, String> {
        let (method, path) = match text.split_once(' ') {
            Some((m, p)) => (m, Some(p.trim())),
            None => (text, None),
        };
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "--forward {text:?}: {method:?} is not a method in capitals; write e.g. GET or \"POST /v1/lookup\""
            ));
        }
        if let Some(p) = path {
            if !p.starts_with('/') || p.contains(char::is_whitespace) {
                return Err(format!(
                    "--forward {text:?}: the path must start with / and hold no spaces, e.g. \"POST /v1/lookup\""
                ));
            }
        }
        Ok(ForwardRule {
            method: method.to_owned(),
            path: path.map(str::to_owned),
        })
    }

    /// Whether a request with this method and path (no query) is forwarded.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        if self.method != method {
            return false;
        }
        match &self.path {
            None => true,
            Some(p) => match p.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => p == path,
            },
        }
    }
}

/// The synthetic answer to a request that is not forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropResponse {
    pub status: u16,
    pub body: String,
    pub content_type: String,
}

/// The validated arguments.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    pub netns: Option<PathBuf>,
    /// `None`: a plain TCP relay.
    pub http: Option<HttpPolicy>,
    pub stats: PathBuf,
}

/// What `--http` does with each request.
#[derive(Debug, Clone)]
pub struct HttpPolicy {
    pub forward: Vec<ForwardRule>,
    pub drop: DropResponse,
}

impl HttpPolicy {
    pub fn forwards(&self, method: &str, path: &str) -> bool {
        self.forward.iter().any(|r| r.matches(method, path))
    }
}

fn resolve(flag: &str, text: &str, problems: &mut Vec<String>) -> Option<SocketAddr> {
    match text.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Some(addr),
        _ => {
            problems.push(format!(
                "--{flag} {text:?}: not a HOST:PORT address; write e.g. 127.0.0.1:9000"
            ));
            None
        }
    }
}

impl EgressArgs {
    /// Checks every flag, reporting every problem at once.
    pub fn validate(&self) -> Result<EgressConfig, EgressError> {
        let mut problems = Vec::new();
        let listen = resolve("listen", &self.listen, &mut problems);
        let upstream = resolve("upstream", &self.upstream, &mut problems);
        let mut forward = Vec::new();
        let rules: Vec<&str> = if self.forward.is_empty() && !self.forward_none {
            vec!["GET", "HEAD"]
        } else {
            self.forward.iter().map(String::as_str).collect()
        };
        for text in rules {
            match ForwardRule::parse(text) {
                Ok(rule) => forward.push(rule),
                Err(e) => problems.push(e),
            }
        }
        // A 1xx is interim: a client would wait for a final response that never comes.
        if !(200..=599).contains(&self.drop_status) {
            problems.push(format!(
                "--drop-status {}: write a final status from 200 to 599, e.g. 200",
                self.drop_status
            ));
        }
        if self.drop_content_type.is_empty() || self.drop_content_type.contains(['\r', '\n']) {
            problems
                .push("--drop-content-type: write one header value, e.g. application/json".into());
        }
        if let Some(problem) = path_problem(&self.stats) {
            problems.push(format!("--stats {}: {problem}", self.stats.display()));
        }
        if let Some(ns) = &self.netns {
            if !ns.exists() {
                problems.push(format!(
                    "--netns {}: no such namespace file; create it with `ip netns add NAME`",
                    ns.display()
                ));
            }
        }
        match (listen, upstream) {
            (Some(listen), Some(upstream)) if problems.is_empty() => Ok(EgressConfig {
                listen,
                upstream,
                netns: self.netns.clone(),
                http: self.http.then(|| HttpPolicy {
                    forward,
                    drop: DropResponse {
                        status: self.drop_status,
                        body: self.drop_body.clone(),
                        content_type: self.drop_content_type.clone(),
                    },
                }),
                stats: self.stats.clone(),
            }),
            _ => Err(EgressError::Invalid(problems)),
        }
    }
}

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
    pub(crate) upstream: SocketAddr,
    pub(crate) http: Option<HttpPolicy>,
    pub(crate) stats: Stats,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Shared {
    pub(crate) fn connect_upstream(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&self.upstream, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// A running proxy.
pub struct Egress {
    shared: Arc<Shared>,
    local: SocketAddr,
    stats_path: PathBuf,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Egress {
    /// Binds (inside the namespace when one is named) and starts serving; `stop` ends the
    /// accept loop and the connections when set (e.g. by a signal handler).
    pub fn start(config: EgressConfig, stop: Arc<AtomicBool>) -> Result<Egress, EgressError> {
        let listener = match &config.netns {
            Some(path) => bind_in_netns(path, config.listen)?,
            None => bind(config.listen)?,
        };
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: config.upstream,
            http: config.http,
            stats: Stats::default(),
            stop,
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = thread::Builder::new()
            .name("egress-accept".into())
            .spawn(move || accept_loop(&listener, &accept_shared))?;
        let egress = Egress {
            shared,
            local,
            stats_path: config.stats,
            acceptor: Some(acceptor),
        };
        egress.write_stats()?;
        Ok(egress)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// Rewrites the stats file whole: a reader never sees half of it.
    pub fn write_stats(&self) -> Result<(), EgressError> {
        let failed = |source| EgressError::Stats {
            path: self.stats_path.clone(),
            source,
        };
        let (staged, mut file): (Staged, File) =
            Staged::create(&self.stats_path).map_err(failed)?;
        let text = self
            .shared
            .stats
            .to_json(self.shared.http.is_some())
            .to_string()
            + "\n";
        file.write_all(text.as_bytes()).map_err(failed)?;
        file.flush().map_err(failed)?;
        drop(file);
        staged.commit().map_err(failed)
    }

    /// Stops accepting and writes the final stats. Connections still open end with the
    /// process.
    pub fn shutdown(mut self) -> Result<(), EgressError> {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.acceptor.take() {
            let _ = handle.join();
        }
        self.write_stats()
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn bind(addr: SocketAddr) -> Result<TcpListener, EgressError> {
    TcpListener::bind(addr).map_err(|source| EgressError::Listen { addr, source })
}

/// Binds inside the namespace at `path` on a thread of its own: setns changes only the
/// calling thread, which then ends, so no other socket of this process is made there.
fn bind_in_netns(path: &PathBuf, addr: SocketAddr) -> Result<TcpListener, EgressError> {
    let ns = File::open(path).map_err(|source| EgressError::Netns {
        path: path.clone(),
        source,
    })?;
    let ns_path = path.clone();
    let handle = thread::Builder::new()
        .name("egress-netns".into())
        .spawn(move || {
            // SAFETY: a valid descriptor of a namespace file, open for the whole call.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(EgressError::Netns {
                    path: ns_path,
                    source: io::Error::last_os_error(),
                });
            }
            bind(addr)
        })?;
    handle
        .join()
        .map_err(|_| EgressError::Io(io::Error::other("the namespace thread panicked")))?
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let fd = listener.as_raw_fd();
    while !shared.stop.load(Ordering::Relaxed) {
        if !wait_readable(fd, Duration::from_millis(100)) {
            continue;
        }
        match listener.accept() {
            Ok((client, _)) => {
                if client.set_nonblocking(false).is_err() {
                    continue;
                }
                shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                let conn_shared = Arc::clone(shared);
                let spawned = thread::Builder::new()
                    .name("egress-conn".into())
                    .stack_size(CONNECTION_STACK_BYTES)
                    .spawn(move || match &conn_shared.http {
                        Some(policy) => conn::serve(client, &conn_shared, policy),
                        None => relay_tcp(client, &conn_shared),
                    });
                if spawned.is_err() {
                    eprintln!("hairline-engine egress: cannot start a connection thread; closing the connection");
                    thread::sleep(Duration::from_millis(10));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                // Out of descriptors and the like: say so, back off, keep serving.
                eprintln!("hairline-engine egress: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// A plain TCP relay: bytes both ways until either side closes. An unreachable upstream
/// closes the client at once (and is counted), so the service sees a failure, not a hang.
fn relay_tcp(client: TcpStream, shared: &Shared) {
    let upstream = match shared.connect_upstream() {
        Ok(s) => s,
        Err(_) => {
            shared.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    };
    let (Ok(client_back), Ok(upstream_back)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let stop = Arc::clone(&shared.stop);
    let back = thread::Builder::new()
        .name("egress-back".into())
        .stack_size(CONNECTION_STACK_BYTES)
        .spawn(move || copy_until_closed(upstream_back, client_back, &stop));
    copy_until_closed(client, upstream, &shared.stop);
    if let Ok(handle) = back {
        let _ = handle.join();
    }
}

/// Copies `from` to `to` until `from` ends (then half-closes `to`) or the proxy stops.
fn copy_until_closed(mut from: TcpStream, mut to: TcpStream, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// `hairline-engine egress`: validates, listens, prints `ready ADDR`, serves until
/// SIGINT/SIGTERM, writes the stats every 0.5 s and at the end.
pub fn run(args: EgressArgs) -> Result<(), EgressError> {
    let config = args.validate()?;
    let stop = Arc::new(AtomicBool::new(false));
    // Installed before listening, so a signal any time after `ready` is a clean stop.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let egress = Egress::start(config, Arc::clone(&stop))?;
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "ready {}", egress.local_addr())?;
        stdout.flush()?;
    }
    let mut written = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(20));
        if written.elapsed() >= STATS_EVERY {
            // A failed periodic write is retried at the next; the final one is reported.
            let _ = egress.write_stats();
            written = Instant::now();
        }
    }
    egress.shutdown()
}

#[cfg(test)]
mod tests;
