//! `hairline-engine sample-cache`: a downstream dependency of limited capacity, and the
//! sample service's client of it.
//!
//! The cache speaks a tiny memcached-like text protocol (`get <key>`, `stats`, `quit`). Each
//! get holds one of `--slots` slots for `--service-us` microseconds, so the cache serves at
//! most `slots * 1e6 / service_us` gets per second and the rest wait in line: a fleet of
//! sample services sharing it saturates before the sum of their own capacities, as a real
//! cluster behind a shared store does (Kraken, OSDI '16, §5.1).
//!
//! Slots are kept as the times they next become free rather than as sleeping threads: a get
//! takes the slot that frees first and is served from `max(now, free_at)` for exactly
//! `service_us`, so the capacity is exact whatever the timer's wake-up error (that error
//! only delays the answer). Each connection has a thread of its own; the fleet that uses
//! the cache keeps one persistent connection per worker thread.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream as StdStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::net::listen::{accept_until, listen, parse_host, ListenError, SHUTDOWN_POLL};
use crate::sample::cost::{hash_bytes, mix64};
use crate::sample::flag::BadFlag;

/// Longest request line; memcached's keys are at most 250 bytes.
const MAX_LINE_BYTES: usize = 300;
/// Most slots: far more than a loopback fleet has connections.
const MAX_SLOTS: usize = 100_000;
/// Longest `--service-us`: ten seconds per get is already no cache at all.
const MAX_SERVICE_US: u64 = 10_000_000;
/// The client's connect timeout: a cache that is gone fails the request quickly.
const CLIENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The client's read timeout: a get waiting longer than this counts as the cache being gone.
const CLIENT_READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug, Clone)]
pub struct SampleCacheArgs {
    /// TCP port; 0 picks a free one and prints `listening on HOST:PORT` first on stdout.
    #[arg(long, default_value_t = 11211)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Gets served at the same time; more wait in line.
    #[arg(long, default_value_t = 1)]
    pub slots: usize,
    /// Microseconds each get holds its slot (slept, not burnt).
    #[arg(long, default_value_t = 100)]
    pub service_us: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SampleCacheError {
    /// A bad `--host` or a port that cannot be listened on.
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error(transparent)]
    BadFlag(#[from] BadFlag),
    #[error("cannot start the sample cache")]
    Io(#[from] io::Error),
}

fn validate(args: &SampleCacheArgs) -> Result<SocketAddr, SampleCacheError> {
    let ip = parse_host(&args.host)?;
    if !(1..=MAX_SLOTS).contains(&args.slots) {
        return Err(BadFlag {
            flag: "slots",
            value: args.slots.to_string(),
            hint: "write the number of gets served at once, from 1 to 100000",
        }
        .into());
    }
    if !(1..=MAX_SERVICE_US).contains(&args.service_us) {
        return Err(BadFlag {
            flag: "service-us",
            value: args.service_us.to_string(),
            hint: "write the microseconds a get holds its slot, from 1 to 10000000",
        }
        .into());
    }
    Ok(SocketAddr::new(ip, args.port))
}

/// The slots, as the instants each one is next free.
struct Slots {
    free_at: Mutex<Vec<Instant>>,
    service: Duration,
    gets: AtomicU64,
    waiting: AtomicU64,
}

impl Slots {
    /// Serves one get: waits for the first free slot, holds it for the service time.
    fn serve(&self) {
        let now = Instant::now();
        let (start, end) = {
            // A panic while holding the lock cannot leave the times inconsistent (each
            // update is one store), so a poisoned lock is used as it is.
            let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
            let (slot, first_free) = free_at
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|&(_, t)| t)
                .unwrap_or((0, now));
            let start = first_free.max(now);
            let end = start + self.service;
            if let Some(t) = free_at.get_mut(slot) {
                *t = end;
            }
            (start, end)
        };
        if start > now {
            self.waiting.fetch_add(1, Ordering::Relaxed);
            sleep_until(start);
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        sleep_until(end);
        self.gets.fetch_add(1, Ordering::Relaxed);
    }
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        thread::sleep(deadline - now);
    }
}

/// Asks the kernel to wake this thread's sleeps on time: the default 50 µs timer slack is
/// as long as a short `--service-us`. Best effort; the call cannot fail on Linux.
pub(crate) fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// The value of a key, 32 hex digits: deterministic, so two caches answer the same.
fn value_of(key: &[u8]) -> String {
    let h = hash_bytes(key);
    format!("{h:016x}{:016x}", mix64(h))
}

/// What one request line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command<'a> {
    Get(&'a [u8]),
    Stats,
    Quit,
    /// Answered `CLIENT_ERROR <message>` (the protocol's word for a bad request).
    Bad(&'static str),
    /// Answered `ERROR` (memcached's answer to an unknown command).
    Unknown,
}

fn parse_command(line: &[u8]) -> Command<'_> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    match (words.next(), words.next(), words.next()) {
        (Some(b"get"), Some(key), None) => Command::Get(key),
        (Some(b"get"), None, _) => Command::Bad("get needs a key"),
        (Some(b"get"), Some(_), Some(_)) => Command::Bad("one key per get"),
        (Some(b"stats"), None, _) => Command::Stats,
        (Some(b"quit"), None, _) => Command::Quit,
        _ => Command::Unknown,
    }
}

fn serve_connection(stream: StdStream, slots: &Slots, shutdown: &AtomicBool) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    // Reads wake up now and then so the thread sees the shutdown flag.
    stream.set_read_timeout(Some(SHUTDOWN_POLL))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::with_capacity(64);
    while !shutdown.load(Ordering::Relaxed) {
        if line.len() > MAX_LINE_BYTES {
            writer.write_all(b"CLIENT_ERROR line too long\r\n")?;
            return Ok(());
        }
        match reader
            .by_ref()
            .take((MAX_LINE_BYTES + 1) as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) if line.is_empty() => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
        if !line.ends_with(b"\n") {
            if line.len() > MAX_LINE_BYTES {
                continue;
            }
            // EOF in the middle of a line: the peer is gone.
            return Ok(());
        }
        let answer = match parse_command(&line) {
            Command::Get(key) => {
                slots.serve();
                let value = value_of(key);
                let mut out = Vec::with_capacity(key.len() + value.len() + 32);
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                out.extend_from_slice(
                    format!(" 0 {}\r\n{value}\r\nEND\r\n", value.len()).as_bytes(),
                );
                out
            }
            Command::Stats => format!(
                "STAT gets {}\r\nSTAT waiting {}\r\nEND\r\n",
                slots.gets.load(Ordering::Relaxed),
                slots.waiting.load(Ordering::Relaxed)
            )
            .into_bytes(),
            Command::Quit => return Ok(()),
            Command::Bad(message) => format!("CLIENT_ERROR {message}\r\n").into_bytes(),
            Command::Unknown => b"ERROR\r\n".to_vec(),
        };
        writer.write_all(&answer)?;
        line.clear();
    }
    Ok(())
}

pub fn run(args: SampleCacheArgs) -> Result<(), SampleCacheError> {
    let addr = validate(&args)?;
    let (listener, local, shutdown) = listen(addr)?;
    let slots = Arc::new(Slots {
        free_at: Mutex::new(vec![Instant::now(); args.slots]),
        service: Duration::from_micros(args.service_us),
        gets: AtomicU64::new(0),
        waiting: AtomicU64::new(0),
    });
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "listening on {local}")?;
        stdout.flush()?;
    }

    accept_until(listener, &shutdown, "sample-cache", |stream| {
        let (slots, shutdown) = (Arc::clone(&slots), Arc::clone(&shutdown));
        // mio hands out non-blocking sockets; a connection's thread blocks.
        let stream = StdStream::from(stream);
        stream.set_nonblocking(false)?;
        thread::Builder::new()
            .name("sample-cache-conn".into())
            .spawn(move || {
                tighten_timer_slack();
                let _ = serve_connection(stream, &slots, &shutdown);
            })?;
        Ok(())
    })?;
    // Connection threads are detached: they end with the process.
    Ok(())
}

/// Parses `--cache HOST:PORT` (an address, or a name that resolves).
pub fn parse_cache_address(value: &str) -> Option<SocketAddr> {
    if let Ok(addr) = value.parse() {
        return Some(addr);
    }
    value.to_socket_addrs().ok()?.next()
}

/// How much of a get's answer is in the buffer.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Partial,
    /// A whole answer (a value or a miss) of this many bytes.
    Complete(usize),
    Bad,
}

fn answer_state(buffer: &[u8]) -> Answer {
    let Some(eol) = buffer.windows(2).position(|w| w == b"\r\n") else {
        return if buffer.len() > MAX_LINE_BYTES {
            Answer::Bad
        } else {
            Answer::Partial
        };
    };
    let header = &buffer[..eol];
    if header == b"END" {
        return Answer::Complete(eol + 2);
    }
    let Some(rest) = header.strip_prefix(b"VALUE ") else {
        return Answer::Bad;
    };
    let length = std::str::from_utf8(rest)
        .ok()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse::<usize>().ok());
    let Some(length) = length else {
        return Answer::Bad;
    };
    let total = eol + 2 + length + 2 + b"END\r\n".len();
    if buffer.len() < total {
        Answer::Partial
    } else if buffer[..total].ends_with(b"\r\nEND\r\n") {
        Answer::Complete(total)
    } else {
        Answer::Bad
    }
}

/// One worker thread's connection to the cache: opened on first use, kept, and opened again
/// after an error.
pub struct CacheClient {
    addr: SocketAddr,
    stream: Option<StdStream>,
    buffer: Vec<u8>,
}

impl CacheClient {
    pub fn new(addr: SocketAddr) -> CacheClient {
        CacheClient {
            addr,
            stream: None,
            buffer: Vec::with_capacity(128),
        }
    }

    /// One get, round trip. An error on a connection that was already open may only mean
    /// the cache restarted since, so that case is tried once more on a new connection.
    pub fn get(&mut self, key: &str) -> io::Result<()> {
        if self.stream.is_some() && self.try_get(key).is_ok() {
            return Ok(());
        }
        self.stream = None;
        let result = self.try_get(key);
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    fn try_get(&mut self, key: &str) -> io::Result<()> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            None => {
                let stream = StdStream::connect_timeout(&self.addr, CLIENT_CONNECT_TIMEOUT)?;
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(CLIENT_READ_TIMEOUT))?;
                self.stream.insert(stream)
            }
        };
        stream.write_all(format!("get {key}\r\n").as_bytes())?;
        self.buffer.clear();
        let mut chunk = [0u8; 256];
        loop {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buffer.extend_from_slice(&chunk[..n]);
            match answer_state(&self.buffer) {
                Answer::Partial => continue,
                // One request in flight per connection, so nothing follows the answer.
                Answer::Complete(_) => return Ok(()),
                Answer::Bad => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the cache's answer is not VALUE ... END",
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: fn(&mut SampleCacheArgs)) -> String {
        let mut a = SampleCacheArgs {
            port: 0,
            host: "127.0.0.1".into(),
            slots: 2,
            service_us: 100,
        };
        f(&mut a);
        validate(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn bad_flags_are_refused_with_the_flag_name() {
        assert!(args(|a| a.slots = 0).contains("--slots 0"));
        assert!(args(|a| a.service_us = 0).contains("--service-us 0"));
        assert!(args(|a| a.host = "nohost".into()).contains("--host"));
        assert!(args(|_| ()).is_empty());
    }

    #[test]
    fn commands_are_parsed_as_memcached_does() {
        assert_eq!(parse_command(b"get user:42\r\n"), Command::Get(b"user:42"));
        assert_eq!(parse_command(b"get  k\n"), Command::Get(b"k"));
        assert_eq!(parse_command(b"stats\r\n"), Command::Stats);
        assert_eq!(parse_command(b"quit\r\n"), Command::Quit);
        assert_eq!(parse_command(b"get\r\n"), Command::Bad("get needs a key"));
        assert_eq!(
            parse_command(b"get a b\r\n"),
            Command::Bad("one key per get")
        );
        assert_eq!(parse_command(b"set a 0 0 1\r\n"), Command::Unknown);
    }

    #[test]
    fn answers_are_complete_only_with_their_value_and_end() {
        let value = value_of(b"k");
        let whole = format!("VALUE k 0 {}\r\n{value}\r\nEND\r\n", value.len());
        assert_eq!(
            answer_state(whole.as_bytes()),
            Answer::Complete(whole.len())
        );
        assert_eq!(
            answer_state(&whole.as_bytes()[..whole.len() - 1]),
            Answer::Partial
        );
        assert_eq!(answer_state(b"VALUE k 0 3\r\nab"), Answer::Partial);
        assert_eq!(answer_state(b"END\r\n"), Answer::Complete(5));
        assert_eq!(answer_state(b"ERROR\r\n"), Answer::Bad);
        assert_eq!(answer_state(b"VALUE k 0 2\r\nabcdEND\r\n"), Answer::Bad);
        assert_eq!(value.len(), 32);
    }

    #[test]
    fn gets_beyond_the_slots_wait_their_turn_and_capacity_is_exact() {
        let slots = Slots {
            free_at: Mutex::new(vec![Instant::now(); 2]),
            service: Duration::from_millis(20),
            gets: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        };
        let started = Instant::now();
        // Six gets at once on two slots: three rounds of 20 ms.
        thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| slots.serve());
            }
        });
        let elapsed = started.elapsed();
        assert_eq!(slots.gets.load(Ordering::Relaxed), 6);
        assert_eq!(slots.waiting.load(Ordering::Relaxed), 0);
        assert!(elapsed >= Duration::from_millis(60), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(200), "{elapsed:?}");
    }

    #[test]
    fn cache_addresses_are_host_and_port() {
        assert_eq!(
            parse_cache_address("127.0.0.1:11211"),
            Some("127.0.0.1:11211".parse().unwrap())
        );
        assert_eq!(parse_cache_address("notaport"), None);
        assert_eq!(parse_cache_address("127.0.0.1:99999"), None);
    }
}
