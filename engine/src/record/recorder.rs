//! A running recorder: the trace opened and its header written, the listener, the writer
//! and mirror threads, a thread per client connection, and the stop that ends them in order.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::net::sockets::wait_readable;
use crate::record::config::RecordConfig;
use crate::record::error::RecordError;
use crate::record::header::header_line;
use crate::record::line::LineFormat;
use crate::record::mirror::MirrorWorker;
use crate::record::proxy;
use crate::record::sample::{SampleSpec, Sampler};
use crate::record::shared::{Clock, CounterSnapshot, Counters, Shared};
use crate::record::writer::{self, Writer};

/// How long requests in flight at a stop may take to finish before they are abandoned.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// How long the writer may take to write what is queued at a stop.
const DRAIN_BOUND: Duration = Duration::from_millis(1000);
/// Stack of a connection thread: its buffers are on the heap.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;
/// Longest wait for an upstream connection to be established.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A running recorder.
pub struct Recorder {
    shared: Arc<Shared>,
    local: SocketAddr,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Recorder {
    /// Opens the trace, writes its header, binds, and starts serving. `stop` ends the
    /// recording when set (e.g. by a signal handler); [`Recorder::shutdown`] completes it.
    pub fn start(config: RecordConfig, stop: Arc<AtomicBool>) -> Result<Recorder, RecordError> {
        let mut out = open_out(&config)?;
        let header = header_line(&config);
        out.write_all(header.as_bytes())
            .map_err(|source| RecordError::Header {
                path: config.out.clone(),
                source,
            })?;
        let listener = TcpListener::bind(config.listen).map_err(|source| RecordError::Listen {
            addr: config.listen,
            source,
        })?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;

        let rng = match config.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        let sampler = Sampler::new(config.spec.clone(), rng);
        let needs_label = sampler.needs_label();
        let format = LineFormat {
            labeler: Arc::new(config.labeler.clone()),
            key: config.key.clone(),
            drop_headers: config.drop_headers.clone(),
        };
        let (samples_tx, samples_rx) = bounded(config.queue);
        let (mirror_tx, mirror_rx) = match config.mirror {
            Some(_) => {
                let (tx, rx) = bounded(config.mirror_queue);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            stop,
            abandon_at: OnceLock::new(),
            draining: AtomicBool::new(false),
            writer_done: AtomicBool::new(false),
            mirror_deadline: OnceLock::new(),
            mirror_workers: AtomicUsize::new(0),
            mirror_in_flight: AtomicU64::new(0),
            mirror_timeout: config.mirror_timeout,
            clock: Clock::new(),
            sampler: Mutex::new(sampler),
            needs_label,
            format: format.clone(),
            samples: samples_tx,
            queued_bytes: AtomicUsize::new(0),
            mirror: mirror_tx,
            mirror_all: config.mirror_all,
            upstream: config.upstream,
            upstream_url: config.upstream_url.clone(),
            connect_timeout: config.upstream_timeout.min(MAX_CONNECT_TIMEOUT),
            upstream_timeout: config.upstream_timeout,
            max_body_bytes: config.max_body_bytes,
            stats_path: config.stats_path.clone(),
            record_all: config.spec == SampleSpec::All,
            active: AtomicUsize::new(0),
            clients: Mutex::new(HashMap::new()),
        });

        let (reservoir, per_endpoint) = match config.spec {
            SampleSpec::Reservoir {
                k,
                interval_us,
                per_endpoint,
            } => (Some((k, interval_us)), per_endpoint),
            _ => (None, false),
        };
        let writer = Writer {
            shared: Arc::clone(&shared),
            rx: samples_rx,
            out,
            format,
            reservoir,
            per_endpoint,
            whole_bytes: header.len() as u64,
            labels: writer::LabelBudget::default(),
            labels_full_told: false,
        };
        thread::Builder::new()
            .name("record-writer".into())
            .spawn(move || writer.run())?;
        if let (Some((addr, _)), Some(rx)) = (config.mirror.clone(), mirror_rx) {
            for i in 0..config.mirror_connections {
                shared.mirror_workers.fetch_add(1, Ordering::AcqRel);
                let worker = MirrorWorker {
                    shared: Arc::clone(&shared),
                    rx: rx.clone(),
                    addr,
                    timeout: config.mirror_timeout,
                };
                thread::Builder::new()
                    .name(format!("record-mirror-{i}"))
                    .spawn(move || worker.run())?;
            }
        }
        let acceptor = {
            let shared = Arc::clone(&shared);
            let max = config.max_connections;
            thread::Builder::new()
                .name("record-accept".into())
                .spawn(move || accept_loop(listener, shared, max))?
        };
        Ok(Recorder {
            shared,
            local,
            acceptor: Some(acceptor),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.shared.counters.snapshot()
    }

    /// Stops accepting, lets requests in flight finish (abandoning them after a short
    /// grace), writes what the writer can within a short bound, and returns the final
    /// counters. Samples still unwritten after the bound count as dropped.
    pub fn shutdown(mut self) -> CounterSnapshot {
        let shared = &self.shared;
        shared.stop.store(true, Ordering::SeqCst);
        let grace_end = Instant::now() + STOP_GRACE;
        let _ = shared.abandon_at.set(grace_end);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // Idle clients' threads are blocked in a read: end it. A thread in the middle of a
        // request finishes it (the response goes out on the write side) and then closes.
        if let Ok(clients) = shared.clients.lock() {
            for stream in clients.values() {
                let _ = stream.shutdown(Shutdown::Read);
            }
        }
        // Abandoned connection threads notice within one read timeout.
        let threads_end = grace_end + Duration::from_millis(200);
        while shared.active.load(Ordering::Acquire) > 0 && Instant::now() < threads_end {
            thread::sleep(Duration::from_millis(5));
        }
        let drain_end = Instant::now() + DRAIN_BOUND;
        let _ = shared.mirror_deadline.set(drain_end);
        shared.draining.store(true, Ordering::Release);
        while !shared.writer_done.load(Ordering::Acquire) && Instant::now() < drain_end {
            thread::sleep(Duration::from_millis(5));
        }
        // A mirror request sent just before the deadline may take its whole timeout; the
        // counters are final only once every mirror thread has counted what it took.
        let mirror_end = drain_end + shared.mirror_timeout + Duration::from_millis(100);
        while shared.mirror_workers.load(Ordering::Acquire) > 0 && Instant::now() < mirror_end {
            thread::sleep(Duration::from_millis(5));
        }
        let mut last = shared.counters.snapshot();
        if !shared.writer_done.load(Ordering::Acquire) {
            // The writer is stuck (a full pipe, a hung disk): what it holds is lost.
            last.dropped = last.sampled.saturating_sub(last.written).max(last.dropped);
        }
        if shared.mirror_workers.load(Ordering::Acquire) > 0 {
            // A mirror thread is stuck past its timeout: what it holds and what is still
            // queued will never be sent.
            let queued = shared.mirror.as_ref().map_or(0, |tx| tx.len() as u64);
            last.mirror_dropped += queued + shared.mirror_in_flight.load(Ordering::Acquire);
        }
        last
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // A recorder dropped without `shutdown` still stops serving.
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn open_out(config: &RecordConfig) -> Result<File, RecordError> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&config.out)
        .map_err(|e| {
            RecordError::Invalid(vec![format!(
                "--out {}: cannot open for writing ({e}); write a path in a writable directory",
                config.out.display()
            )])
        })
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, max_connections: usize) {
    let fd = listener.as_raw_fd();
    let mut next_id: u64 = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        if shared.active.load(Ordering::Acquire) >= max_connections {
            // Further clients wait in the listen backlog until a connection ends.
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        if !wait_readable(fd, Duration::from_millis(100)) {
            continue;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let id = next_id;
                next_id += 1;
                if let (Ok(handle), Ok(mut clients)) = (stream.try_clone(), shared.clients.lock()) {
                    clients.insert(id, handle);
                }
                shared.active.fetch_add(1, Ordering::AcqRel);
                let conn_shared = Arc::clone(&shared);
                let spawned = thread::Builder::new()
                    .name("record-conn".into())
                    .stack_size(CONNECTION_STACK_BYTES)
                    .spawn(move || {
                        proxy::serve(stream, &conn_shared);
                        if let Ok(mut clients) = conn_shared.clients.lock() {
                            clients.remove(&id);
                        }
                        conn_shared.active.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    if let Ok(mut clients) = shared.clients.lock() {
                        clients.remove(&id);
                    }
                    shared.active.fetch_sub(1, Ordering::AcqRel);
                    eprintln!("hairline-engine record: cannot start a connection thread; closing the connection");
                    thread::sleep(Duration::from_millis(10));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors and the like: say so, back off, keep serving.
                eprintln!("hairline-engine record: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
