//! `hairline-engine sample-service`: a realistic service to test hairline against.
//!
//! Requests cost heavy-tailed, deterministic amounts of real CPU and memory (see
//! `cost`), so the same request stream sent to two instances does the same work on
//! both, and a regression knob makes the difference hairline must find.
//!
//! Design: one acceptor thread hands connections round-robin to a fixed pool of worker
//! threads; each worker runs its own `mio` event loop over its connections and does the
//! request's work inline (`worker`, `handler`). Any number of keep-alive connections is
//! served by `--threads` threads, and no lock is taken on the request path except the
//! counters' atomics.
//!
//! `--work sleep` sleeps a request's work units instead of burning them, so each worker
//! thread acts as a CPU of its own and a fleet fits on a small machine; `--cache` adds a
//! blocking round trip to a `sample-cache` per API request, a shared dependency of limited
//! capacity. `/metrics` splits each API request's time into queue, cache wait and work.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread;

use mio::net::TcpStream;
use mio::{Poll, Waker};

use crate::net::listen::{accept_until, listen, parse_host, ListenError};
use crate::sample::cache::parse_cache_address;
use crate::sample::flag::BadFlag;
use crate::sample::handler::{Settings, Shared, WorkKind};
use crate::sample::log::{LogCodec, MAX_LOG_BATCH};
use crate::sample::metrics::Metrics;
use crate::sample::ops::Ops;
use crate::sample::stages::{Slowdowns, STAGE_NAMES_HINT};
use crate::sample::stall::Stall;
use crate::sample::worker::{worker_loop, WAKER};

/// Upper bound of the memory `--regress-mem` keeps resident, over all workers.
const MAX_RETAINED_BYTES: u64 = 1 << 30;
/// Buffers each worker keeps from `--regress-mem` (fewer when they would pass the bound).
const RETAINED_BUFFERS_PER_WORKER: u64 = 256;
/// Largest `--regress-mem`: more per request would only test the machine's swap.
const MAX_REGRESS_MEM_BYTES: u64 = 1 << 30;
/// Largest `--extra-reads`: 100,000 reads already cost ~0.2 s per request.
const MAX_EXTRA_READS: u64 = 100_000;

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
    /// Which requests stall: the same seed stalls the same request ids again. Absent: one is
    /// drawn at start (printed, and exported as `sample_stall_seed`), so each run of a
    /// replayed trace stalls other requests.
    #[arg(long, value_name = "S")]
    pub stall_seed: Option<u32>,
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
    /// For testing the fallback only: do not ask the kernel for receive timestamps
    /// (SO_TIMESTAMPNS), so every request's queue time starts at its read, as on a kernel
    /// that gives none; they are counted in `sample_queue_unstamped_total`.
    #[arg(long)]
    pub test_no_recv_timestamps: bool,
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
        stall: Stall::from_flags(args.stall_every, args.stall_ms, args.stall_seed)?,
        ops: Ops::from_flags(args.ops, args.op_groups, args.code_cache, args.miss_units)?,
    })
}

struct WorkerHandle {
    sender: Sender<TcpStream>,
    waker: Arc<Waker>,
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
        recv_timestamps: !args.test_no_recv_timestamps,
    };

    let (listener, local, shutdown) = listen(addr)?;
    if let Some(stall) = stall {
        // On stderr: stdout's first line is the contract with the parent (below).
        eprintln!(
            "sample-service: stalling 1 request in {} with seed {} (--stall-seed {} stalls the same ones)",
            stall.every, stall.seed, stall.seed
        );
    }

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
                stall_seed: None,
                ops: 0,
                op_groups: None,
                code_cache: None,
                miss_units: None,
                test_no_recv_timestamps: false,
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
        assert!(args(|a| a.stall_seed = Some(4)).contains("--stall-seed 4"));
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
