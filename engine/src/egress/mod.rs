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

mod config;
mod conn;
mod error;
mod shared;

pub use config::{DropResponse, EgressArgs, EgressConfig, ForwardRule, HttpPolicy};
pub use error::EgressError;
use shared::Shared;
pub use shared::{Counts, Stats};

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::format::output::Staged;
use crate::net::sockets::wait_readable;

/// How often the stats file is rewritten.
const STATS_EVERY: Duration = Duration::from_millis(500);
/// Stack of a connection thread: its buffers are on the heap.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;
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
