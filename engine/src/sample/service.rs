//! `hairline-engine sample-service`: a realistic service to test hairline against.
//!
//! Requests cost heavy-tailed, deterministic amounts of real CPU and memory (see
//! `cost`), so the same request stream sent to two instances does the same work on
//! both, and a regression knob makes the difference hairline must find.
//!
//! Design: one acceptor thread hands connections round-robin to a fixed pool of worker
//! threads; each worker runs its own `mio` event loop over its connections and does the
//! request's work inline. Any number of keep-alive connections is served by `--threads`
//! threads, and no lock is taken on the request path except the counters' atomics.
//!
//! `--work sleep` sleeps a request's work units instead of burning them, so each worker
//! thread acts as a CPU of its own and a fleet fits on a small machine; `--cache` adds a
//! blocking round trip to a `sample-cache` per API request, a shared dependency of limited
//! capacity. `/metrics` splits each API request's time into queue, cache wait and work.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::net::http::{parse_request_head, BodyFraming, RequestHead};
use crate::net::listen::{accept_until, listen, parse_host, ListenError, SHUTDOWN_POLL};
use crate::net::recv_stamp;
use crate::sample::cache::{parse_cache_address, tighten_timer_slack, CacheClient};
use crate::sample::cost::{self, Endpoint};
use crate::sample::flag::BadFlag;
use crate::sample::log::{LogCodec, RequestLog, MAX_LOG_BATCH};
use crate::sample::metrics::{Metrics, Route, Status};
use crate::sample::ops::{CodeCache, Ops};
use crate::sample::stages::{self, Slowdowns, STAGE_NAMES_HINT};
use crate::sample::stall::Stall;

/// Request bodies are read and ignored; larger ones are refused (413).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Upper bound of the memory `--regress-mem` keeps resident, over all workers.
const MAX_RETAINED_BYTES: u64 = 1 << 30;
/// Buffers each worker keeps from `--regress-mem` (fewer when they would pass the bound).
const RETAINED_BUFFERS_PER_WORKER: u64 = 256;
/// Largest `--regress-mem`: more per request would only test the machine's swap.
const MAX_REGRESS_MEM_BYTES: u64 = 1 << 30;
/// Largest `--extra-reads`: 100,000 reads already cost ~0.2 s per request.
const MAX_EXTRA_READS: u64 = 100_000;
/// Nanoseconds `--work sleep` sleeps per work unit: about what `burn` takes for one on a
/// current x86 core, so both kinds of work give the service about the same capacity.
pub const SLEEP_NS_PER_UNIT: u64 = 1_000;

/// What a request's work units are spent on.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkKind {
    /// Burn real CPU (the default).
    Cpu,
    /// Sleep: each worker thread then behaves as a CPU of its own.
    Sleep,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SampleServiceArgs {
    /// TCP port; 0 picks a free one and prints `listening on HOST:PORT` first on stdout.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Worker threads [default: the CPUs this process may run on].
    #[arg(long)]
    pub threads: Option<usize>,
    /// JIT-like warm-up: requests cost up to 3x more until this many seconds after the first
    /// API request; then `sample_warm` is 1 and /warm answers 200.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub warmup_s: f64,
    /// Regression: every request does this fraction more CPU work (0.03 = 3% more).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub regress_cpu: f64,
    /// Regression in one function: NAME=FRACTION makes that named stage of a request's work
    /// (sample/stages.rs: parse_request, check_auth, load_profile, rank_items, render_json,
    /// escape_strings, write_audit_log) do the fraction more; repeat for several.
    #[arg(long, value_name = "NAME=FRACTION")]
    pub slow_function: Vec<String>,
    /// Regression: every request allocates and touches this many more bytes, and the
    /// process keeps a bounded pool of them resident.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub regress_mem: u64,
    /// Regression: every request does this many more simulated downstream reads.
    #[arg(long, default_value_t = 0)]
    pub extra_reads: u64,
    /// What the work units cost: `cpu` burns them, `sleep` sleeps 1 µs per unit
    /// (`--regress-cpu` scales either the same way; memory touching is the same).
    #[arg(long, value_enum, default_value_t = WorkKind::Cpu)]
    pub work: WorkKind,
    /// A `hairline-engine sample-cache` at HOST:PORT: each API request makes one blocking get
    /// to it first (one connection per worker thread); when it cannot be reached the request
    /// is answered 503.
    #[arg(long, value_name = "HOST:PORT")]
    pub cache: Option<String>,
    /// A tunable knob: each worker logs its requests in a sorted buffer flushed every N
    /// requests (fixed cost per flush, a cost per buffered entry per request: CPU per request
    /// has an interior optimum in N). Absent: no log, no cost.
    #[arg(long, value_name = "N")]
    pub log_batch: Option<u32>,
    /// The log's codec (needs `--log-batch`): a stronger one costs more per flush and less
    /// per entry, moving the best `--log-batch` up [default: none].
    #[arg(long, value_enum)]
    pub log_codec: Option<LogCodec>,
    /// Pause knob: about one API request in N (by a hash of its request id, else of its path
    /// and query) stalls its worker for `--stall-ms`, as a stop-the-world GC would.
    #[arg(long, value_name = "N")]
    pub stall_every: Option<u64>,
    /// How long a stall holds its worker, in milliseconds (needs `--stall-every`).
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub stall_ms: Option<f64>,
    /// Serve `/api/op/{k}` for k in 0..N, ops that run functions of their group (0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub ops: u32,
    /// Op k belongs to group k % G and runs 8 of its group's 12 functions plus 2 common
    /// ones [default: 4, at most --ops].
    #[arg(long, value_name = "G")]
    pub op_groups: Option<u32>,
    /// Each worker keeps an LRU cache of this many functions; a miss burns `--miss-units`
    /// of real CPU, even under `--work sleep` (needs `--ops`). Absent: no cache, no cost.
    #[arg(long, value_name = "SLOTS")]
    pub code_cache: Option<u32>,
    /// Work units one code cache miss costs [default: 40] (needs `--code-cache`).
    #[arg(long, value_name = "U")]
    pub miss_units: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SampleServiceError {
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(transparent)]
    BadFlag(#[from] BadFlag),
    #[error("cannot start the sample service")]
    Io(#[from] io::Error),
}

/// Checked settings the workers share.
#[derive(Debug, Clone)]
struct Settings {
    warmup_s: f64,
    regress_cpu: f64,
    slow: Slowdowns,
    regress_mem: u64,
    extra_reads: u64,
    retained_per_worker: usize,
    work: WorkKind,
    cache: Option<SocketAddr>,
    log: Option<(u32, LogCodec)>,
    stall: Option<Stall>,
}

/// The flags `validate` checks and turns into values.
struct Checked {
    addr: SocketAddr,
    slow: Slowdowns,
    threads: usize,
    cache: Option<SocketAddr>,
    log: Option<(u32, LogCodec)>,
    stall: Option<Stall>,
    ops: Option<Ops>,
}

fn validate(args: &SampleServiceArgs) -> Result<Checked, SampleServiceError> {
    let ip = parse_host(&args.host)?;
    let threads = match args.threads {
        Some(0) => {
            return Err(BadFlag {
                flag: "threads",
                value: "0".into(),
                hint: "write a positive number of worker threads, or leave it out",
            }
            .into())
        }
        Some(n) => n,
        None => thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    };
    if !(args.warmup_s.is_finite() && args.warmup_s >= 0.0) {
        return Err(BadFlag {
            flag: "warmup-s",
            value: args.warmup_s.to_string(),
            hint: "write a number of seconds >= 0",
        }
        .into());
    }
    if !(args.regress_cpu.is_finite() && args.regress_cpu > -1.0 && args.regress_cpu <= 100.0) {
        return Err(BadFlag {
            flag: "regress-cpu",
            value: args.regress_cpu.to_string(),
            hint: "write a fraction of extra work per request in (-1, 100], e.g. 0.03 for 3% more",
        }
        .into());
    }
    let slow = Slowdowns::parse(&args.slow_function).ok_or_else(|| BadFlag {
        flag: "slow-function",
        value: args.slow_function.join(" "),
        hint: STAGE_NAMES_HINT,
    })?;
    if args.regress_mem > MAX_REGRESS_MEM_BYTES {
        return Err(BadFlag {
            flag: "regress-mem",
            value: args.regress_mem.to_string(),
            hint: "write at most 1073741824 bytes (1 GiB) per request",
        }
        .into());
    }
    if args.extra_reads > MAX_EXTRA_READS {
        return Err(BadFlag {
            flag: "extra-reads",
            value: args.extra_reads.to_string(),
            hint: "write at most 100000 extra reads per request",
        }
        .into());
    }
    let cache = match &args.cache {
        None => None,
        Some(value) => Some(parse_cache_address(value).ok_or_else(|| BadFlag {
            flag: "cache",
            value: value.clone(),
            hint: "write the sample-cache's HOST:PORT, e.g. 127.0.0.1:11211",
        })?),
    };
    let log = match (args.log_batch, args.log_codec) {
        (None, None) => None,
        (None, Some(codec)) => {
            return Err(BadFlag {
                flag: "log-codec",
                value: format!("{codec:?}").to_lowercase(),
                hint: "the codec is the request log's: pass --log-batch N too",
            }
            .into())
        }
        (Some(n), codec) if (1..=MAX_LOG_BATCH).contains(&n) => {
            Some((n, codec.unwrap_or(LogCodec::None)))
        }
        (Some(n), _) => {
            return Err(BadFlag {
                flag: "log-batch",
                value: n.to_string(),
                hint: "write a number of requests per flush from 1 to 65536, or leave it out",
            }
            .into())
        }
    };
    Ok(Checked {
        addr: SocketAddr::new(ip, args.port),
        slow,
        threads,
        cache,
        log,
        stall: Stall::from_flags(args.stall_every, args.stall_ms)?,
        ops: Ops::from_flags(args.ops, args.op_groups, args.code_cache, args.miss_units)?,
    })
}

struct Response {
    status: Status,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Response {
    fn text(status: Status, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }

    fn json(body: String) -> Response {
        Response {
            status: Status::Ok,
            content_type: "application/json",
            body: body.into_bytes(),
        }
    }
}

/// State one worker keeps between requests.
struct WorkerState {
    shared: Arc<Shared>,
    /// `--regress-mem` buffers kept resident, oldest first.
    retained: VecDeque<Vec<u8>>,
    cache: Option<CacheClient>,
    log: Option<RequestLog>,
    /// This worker's `--code-cache`.
    code_cache: Option<CodeCache>,
}

struct Shared {
    settings: Settings,
    metrics: Metrics,
    ops: Option<Ops>,
}

/// What an API request asks for.
#[derive(Debug, Clone, Copy)]
enum Api {
    Endpoint(Endpoint),
    Op(u32),
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then_some(v)
    })
}

impl WorkerState {
    /// Answers one request that arrived at `arrival_unix_ns`.
    fn handle(&mut self, head: &RequestHead, arrival_unix_ns: u64) -> (Route, Response) {
        let (path, query) = head
            .target
            .split_once('?')
            .unwrap_or((head.target.as_str(), ""));
        let route = Route::from_path(path);
        if !matches!(head.method.as_str(), "GET" | "HEAD" | "POST") {
            return (route, Response::text(Status::MethodNotAllowed, "use GET\n"));
        }
        let api = match route {
            Route::Op => self
                .shared
                .ops
                .as_ref()
                .and_then(|ops| ops.catalog.parse_path(path))
                .map(Api::Op),
            _ => route.endpoint().map(Api::Endpoint),
        };
        if let Some(api) = api {
            let response = match self.user_of(query, head.request_id.as_deref()) {
                Ok(user) => {
                    let queue_ns = recv_stamp::unix_now_ns().saturating_sub(arrival_unix_ns);
                    self.shared.metrics.queue.observe_ns(queue_ns);
                    if let Some(stall) = self.shared.settings.stall {
                        let key = head.request_id.as_deref();
                        if stall.hits(key.unwrap_or(head.target.as_bytes())) {
                            self.shared.metrics.stalls.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(stall.pause);
                        }
                    }
                    self.serve_api(api, user)
                }
                Err(message) => Response::text(Status::BadRequest, message),
            };
            return (route, response);
        }
        let settings = &self.shared.settings;
        let metrics = &self.shared.metrics;
        let response = match route {
            Route::Healthz => Response::text(Status::Ok, "ok\n"),
            Route::Warm => {
                if metrics.is_warm(settings.warmup_s) {
                    Response::text(Status::Ok, "warm\n")
                } else {
                    Response::text(Status::Unavailable, "warming up\n")
                }
            }
            Route::Metrics => Response {
                status: Status::Ok,
                content_type: "text/plain; version=0.0.4",
                body: metrics.render(settings.warmup_s).into_bytes(),
            },
            Route::DebugProfile => Response::text(
                Status::Ok,
                self.shared
                    .ops
                    .as_ref()
                    .map(Ops::render_profile)
                    .unwrap_or_default(),
            ),
            // The API routes were answered above; only unknown paths reach this arm.
            Route::Other | Route::Feed | Route::Profile | Route::Search | Route::Op => {
                Response::text(Status::NotFound, format!("no such path: {path}\n"))
            }
        };
        (route, response)
    }

    fn user_of(&self, query: &str, request_id: Option<&[u8]>) -> Result<u64, String> {
        if let Some(raw) = query_param(query, "user") {
            return raw.parse::<u64>().map_err(|_| {
                format!("user must be a non-negative integer, got {raw:?}; write e.g. ?user=123\n")
            });
        }
        Ok(match request_id {
            Some(id) => cost::user_for_request_id(id),
            None => {
                let n = self
                    .shared
                    .metrics
                    .anonymous
                    .fetch_add(1, Ordering::Relaxed);
                cost::zipf_user(cost::mix64(n), cost::USERS, cost::ZIPF_S)
            }
        })
    }

    fn serve_api(&mut self, api: Api, user: u64) -> Response {
        if let Some(cache) = &mut self.cache {
            let started = Instant::now();
            let outcome = cache.get(&format!("user:{user}"));
            let metrics = &self.shared.metrics;
            metrics.cache_wait.observe_ns(elapsed_ns(started));
            if let Err(e) = outcome {
                metrics
                    .cache_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Response::text(
                    Status::Unavailable,
                    format!("the cache cannot be reached: {e}\n"),
                );
            }
        }
        let settings = &self.shared.settings;
        let metrics = &self.shared.metrics;
        let work_started = Instant::now();
        let first = *metrics.first_api_request.get_or_init(Instant::now);
        let warm = cost::warmup_factor(first.elapsed().as_secs_f64(), settings.warmup_s);
        let (label, base, reads, memory_factor, miss_units) = match api {
            Api::Endpoint(e) => (
                Cow::Borrowed(e.path()),
                cost::base_units(e, user),
                e.downstream_reads() + settings.extra_reads,
                e.memory_factor(),
                0,
            ),
            Api::Op(k) => {
                // `handle` makes an `Api::Op` only when there are ops.
                let Some(ops) = self.shared.ops.as_ref() else {
                    return Response::text(Status::NotFound, "no op endpoints: pass --ops N\n");
                };
                let cost = ops.run(k, self.code_cache.as_mut());
                metrics
                    .code_cache_lookups
                    .fetch_add(cost.lookups, Ordering::Relaxed);
                metrics
                    .code_cache_misses
                    .fetch_add(cost.misses, Ordering::Relaxed);
                let path = format!("{}{k}", crate::sample::ops::OP_PREFIX);
                (
                    Cow::Owned(path),
                    cost.units as f64,
                    0,
                    1,
                    cost.misses * ops.miss_units,
                )
            }
        };
        let units = cost::effective_units(base, warm, settings.regress_cpu, reads);
        let checksum = match settings.work {
            WorkKind::Cpu => stages::run(user, units, &settings.slow),
            WorkKind::Sleep => {
                let slept = (units as f64 * settings.slow.factor()).round() as u64;
                thread::sleep(Duration::from_nanos(
                    slept.saturating_mul(SLEEP_NS_PER_UNIT),
                ));
                cost::mix64(user ^ units)
            }
        };
        // A miss models a JIT's recompilation, which costs CPU whatever the work kind.
        let checksum = if miss_units > 0 {
            cost::burn(checksum, miss_units)
        } else {
            checksum
        };
        let checksum = match &mut self.log {
            None => checksum,
            Some(log) => {
                let (folded, steps) = log.append(user ^ units, settings.work == WorkKind::Cpu);
                if settings.work == WorkKind::Sleep {
                    thread::sleep(Duration::from_nanos(
                        steps.saturating_mul(SLEEP_NS_PER_UNIT) / cost::STEPS_PER_UNIT,
                    ));
                }
                checksum ^ folded
            }
        };

        // Memory scales with the base cost, not the warm-up or CPU knob, so the knobs stay
        // independent of each other.
        let bytes = (base.round() as u64) * cost::BYTES_PER_UNIT * memory_factor;
        let mut scratch = vec![0u8; usize::try_from(bytes).unwrap_or(usize::MAX / 2)];
        let mut folded = cost::touch(&mut scratch, checksum);
        drop(scratch);
        if settings.regress_mem > 0 {
            let mut extra =
                vec![0u8; usize::try_from(settings.regress_mem).unwrap_or(usize::MAX / 2)];
            folded ^= cost::touch(&mut extra, checksum);
            if settings.retained_per_worker > 0 {
                if self.retained.len() >= settings.retained_per_worker {
                    self.retained.pop_front();
                }
                self.retained.push_back(extra);
            }
        }

        metrics.work.observe_ns(elapsed_ns(work_started));
        if let Api::Endpoint(e) = api {
            metrics.reads[e.index()].fetch_add(reads, Ordering::Relaxed);
        }
        let units = units + miss_units;
        metrics.work_units.fetch_add(units, Ordering::Relaxed);
        Response::json(format!(
            "{{\"endpoint\":\"{label}\",\"user\":{user},\"work_units\":{units},\"downstream_reads\":{reads},\"checksum\":\"{:016x}\"}}\n",
            std::hint::black_box(folded),
        ))
    }
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn write_response(out: &mut Vec<u8>, response: &Response, head_only: bool, keep_alive: bool) {
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}\r\n",
        response.status.code(),
        response.status.reason(),
        response.content_type,
        response.body.len(),
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        },
    );
    if !head_only {
        out.extend_from_slice(&response.body);
    }
}

struct Connection {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// Close once the output is flushed (client asked, or the stream is unusable).
    closing: bool,
    writable_interest: bool,
    /// When the oldest unanswered bytes of `input` arrived (Unix ns); a request's queueing
    /// starts here.
    arrival_unix_ns: u64,
    /// When the latest read's bytes arrived.
    last_arrival_unix_ns: u64,
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
                    Ok((n, arrived_ns)) => {
                        if self.input.is_empty() {
                            self.arrival_unix_ns = arrived_ns;
                        }
                        self.last_arrival_unix_ns = arrived_ns;
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
                    let (route, response) = state.handle(&head, self.arrival_unix_ns);
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
                    self.arrival_unix_ns = self.last_arrival_unix_ns;
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

const WAKER: Token = Token(usize::MAX);

struct WorkerHandle {
    sender: Sender<TcpStream>,
    waker: Arc<Waker>,
}

fn worker_loop(
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
                    // Without it, queue times start at the read (said in docs/engine.md).
                    recv_stamp::enable(stream.as_raw_fd());
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
                                arrival_unix_ns: 0,
                                last_arrival_unix_ns: 0,
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

pub fn run(args: SampleServiceArgs) -> Result<(), SampleServiceError> {
    let Checked {
        addr,
        slow,
        threads,
        cache,
        log,
        stall,
        ops,
    } = validate(&args)?;
    // Without --regress-mem nothing is retained (checked_div yields None for 0 bytes).
    let retained_per_worker = (MAX_RETAINED_BYTES / threads as u64)
        .checked_div(args.regress_mem)
        .map_or(0, |bound| bound.min(RETAINED_BUFFERS_PER_WORKER) as usize);
    let settings = Settings {
        warmup_s: args.warmup_s,
        regress_cpu: args.regress_cpu,
        slow,
        regress_mem: args.regress_mem,
        extra_reads: args.extra_reads,
        retained_per_worker,
        work: args.work,
        cache,
        log,
        stall,
    };

    let (listener, local, shutdown) = listen(addr)?;

    let shared = Arc::new(Shared {
        settings,
        metrics: Metrics::new(),
        ops,
    });
    let mut workers = Vec::with_capacity(threads);
    let mut joins = Vec::with_capacity(threads);
    for i in 0..threads {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (sender, receiver) = mpsc::channel();
        let (shared, shutdown) = (Arc::clone(&shared), Arc::clone(&shutdown));
        joins.push(
            thread::Builder::new()
                .name(format!("sample-worker-{i}"))
                .spawn(move || worker_loop(poll, receiver, shared, shutdown))?,
        );
        workers.push(WorkerHandle { sender, waker });
    }

    // The first line of stdout is the contract with a parent that passed --port 0.
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "listening on {local}")?;
        stdout.flush()?;
    }

    let next = AtomicUsize::new(0);
    accept_until(listener, &shutdown, "sample-service", |stream| {
        let _ = stream.set_nodelay(true);
        let i = next.fetch_add(1, Ordering::Relaxed) % workers.len();
        if workers[i].sender.send(stream).is_ok() {
            let _ = workers[i].waker.wake();
        }
        Ok(())
    })?;
    // The workers sleep in their polls: woken, each sees the flag and ends now. Their wakers
    // stay open until they have: closing an eventfd drops its pending event from the poll.
    for worker in &workers {
        let _ = worker.waker.wake();
    }
    for join in joins {
        match join.join() {
            Ok(result) => result?,
            Err(_) => return Err(io::Error::other("a worker thread panicked").into()),
        }
    }
    drop(workers);
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

    #[test]
    fn query_params_are_found_by_name() {
        assert_eq!(query_param("a=1&user=42", "user"), Some("42"));
        assert_eq!(query_param("users=1", "user"), None);
    }

    #[test]
    fn bad_flags_are_refused_with_the_flag_name() {
        let args = |f: fn(&mut SampleServiceArgs)| {
            let mut a = SampleServiceArgs {
                port: 0,
                host: "127.0.0.1".into(),
                threads: None,
                warmup_s: 0.0,
                regress_cpu: 0.0,
                slow_function: Vec::new(),
                regress_mem: 0,
                extra_reads: 0,
                work: WorkKind::Cpu,
                cache: None,
                log_batch: None,
                log_codec: None,
                stall_every: None,
                stall_ms: None,
                ops: 0,
                op_groups: None,
                code_cache: None,
                miss_units: None,
            };
            f(&mut a);
            validate(&a)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(args(|a| a.regress_cpu = -1.5).contains("--regress-cpu"));
        assert!(args(|a| a.warmup_s = -1.0).contains("--warmup-s"));
        assert!(args(|a| a.threads = Some(0)).contains("--threads"));
        assert!(args(|a| a.host = "localhost:1".into()).contains("--host"));
        assert!(args(|a| a.regress_mem = 1 << 40).contains("--regress-mem"));
        assert!(args(|a| a.extra_reads = 1 << 40).contains("--extra-reads"));
        assert!(args(|a| a.cache = Some("notaport".into())).contains("--cache notaport"));
        assert!(args(|a| a.log_batch = Some(0)).contains("--log-batch 0"));
        assert!(args(|a| a.log_batch = Some(1 << 20)).contains("--log-batch"));
        assert!(args(|a| a.log_codec = Some(LogCodec::Small)).contains("--log-codec small"));
        assert!(args(|a| {
            a.log_batch = Some(4096);
            a.log_codec = Some(LogCodec::Fast);
        })
        .is_empty());
        assert!(args(|a| a.stall_every = Some(300)).contains("--stall-every 300"));
        assert!(args(|a| a.stall_ms = Some(20.0)).contains("--stall-ms 20"));
        assert!(args(|a| a.code_cache = Some(16)).contains("--code-cache 16"));
        assert!(args(|a| {
            a.ops = 8;
            a.op_groups = Some(9);
        })
        .contains("--op-groups 9"));
        assert!(args(|a| {
            a.ops = 64;
            a.code_cache = Some(16);
            a.stall_every = Some(400);
            a.stall_ms = Some(20.0);
        })
        .is_empty());
        assert!(args(|_| ()).is_empty());
    }
}
