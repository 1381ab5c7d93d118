//! What each of the engine's mio servers (the sample service, the sample cache) starts
//! with: `--host` checked, a listener that names a port in use, the stop flag SIGTERM and
//! SIGINT set, and an accept loop that a stop wakes at once.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener as StdListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

/// How often idle loops look at the shutdown flag. A stop does not wait for it: a stop
/// signal wakes the accepting poll through a pipe (`accept_until`), which wakes the workers;
/// it took up to this long, twice per batch of every experiment, before they did.
pub const SHUTDOWN_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("port {port} on {host} is already in use; pass --port 0 to pick a free port, or stop the process holding it")]
    PortInUse { host: String, port: u16 },
    #[error("cannot listen on {host}:{port}")]
    Listen {
        host: String,
        port: u16,
        source: io::Error,
    },
    #[error("--host {0:?} is not an IP address (write e.g. 127.0.0.1 or ::1)")]
    BadHost(String),
    #[error("cannot set up the listener")]
    Io(#[from] io::Error),
}

/// `--host` as an IP address.
pub fn parse_host(host: &str) -> Result<IpAddr, ListenError> {
    host.parse()
        .map_err(|_| ListenError::BadHost(host.to_string()))
}

/// Listens on `addr`, naming a port in use and how to pick another.
pub fn bind(addr: SocketAddr) -> Result<StdListener, ListenError> {
    StdListener::bind(addr).map_err(|source| {
        let (host, port) = (addr.ip().to_string(), addr.port());
        if source.kind() == io::ErrorKind::AddrInUse {
            ListenError::PortInUse { host, port }
        } else {
            ListenError::Listen { host, port, source }
        }
    })
}

/// The non-blocking listener on `addr`, its bound address (port 0 resolved) and the flag
/// SIGTERM and SIGINT set: what each of the engine's servers starts with.
pub fn listen(addr: SocketAddr) -> Result<(TcpListener, SocketAddr, Arc<AtomicBool>), ListenError> {
    let std_listener = bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    let shutdown = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&shutdown))?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&shutdown))?;
    Ok((TcpListener::from_std(std_listener), local, shutdown))
}

/// Accepts connections and hands each to `on_stream` until `shutdown` is set. An accept that
/// fails (out of descriptors and the like) is said on stderr, under `who`, and serving goes on.
pub fn accept_until(
    mut listener: TcpListener,
    shutdown: &AtomicBool,
    who: &str,
    mut on_stream: impl FnMut(TcpStream) -> io::Result<()>,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    const LISTENER: Token = Token(0);
    const STOP: Token = Token(1);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    // A stop signal also writes to this pipe, so the poll wakes whichever thread took the
    // signal and however close to the poll's start it came (a flag alone can be set just
    // after the loop looked at it, and the poll then sleeps its whole timeout).
    let (stop_read, stop_write) = UnixStream::pair()?;
    stop_read.set_nonblocking(true)?;
    stop_write.set_nonblocking(true)?;
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::low_level::pipe::register(signal, stop_write.try_clone()?)?;
    }
    poll.registry().register(
        &mut SourceFd(&stop_read.as_raw_fd()),
        STOP,
        Interest::READABLE,
    )?;
    let mut events = Events::with_capacity(64);
    while !shutdown.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(SHUTDOWN_POLL)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if !events.iter().any(|e| e.token() == LISTENER) {
            continue;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => on_stream(stream)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("{who}: accept failed: {e}");
                    thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }
    }
    Ok(())
}
