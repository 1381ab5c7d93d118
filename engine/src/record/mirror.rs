//! Mirror mode (ServiceLab's forker): live requests are sent again to a test instance,
//! whose answers are read and thrown away.
//!
//! The proxy threads hand requests to a bounded queue and never wait on it; a few mirror
//! threads, each with its own keep-alive connection, drain it. A mirror that is down, slow
//! or behind costs dropped mirror requests (counted), never live latency.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::http::ResponseTracker;
use super::Shared;

/// How long the mirror is left alone after a failed connect before the next attempt;
/// requests that come meanwhile are dropped at once rather than each waiting to fail.
const RETRY_AFTER: Duration = Duration::from_millis(200);
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// One request to send to the mirror: the bytes the client sent, unchanged.
#[derive(Debug)]
pub struct MirrorJob {
    pub bytes: Vec<u8>,
    pub head_request: bool,
}

pub struct MirrorWorker {
    pub shared: Arc<Shared>,
    pub rx: Receiver<MirrorJob>,
    pub addr: SocketAddr,
    pub timeout: Duration,
}

impl MirrorWorker {
    pub fn run(self) {
        let counters = &self.shared.counters;
        let mut conn: Option<TcpStream> = None;
        let mut down_until: Option<Instant> = None;
        let mut scratch = vec![0u8; 16 * 1024];
        loop {
            let job = match self.rx.recv_timeout(IDLE_WAIT) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if self.shared.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let stopping = self.shared.stop.load(Ordering::Relaxed);
            if stopping || down_until.is_some_and(|t| Instant::now() < t) {
                counters.mirror_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if conn.is_none() {
                match self.connect() {
                    Ok(c) => conn = Some(c),
                    Err(_) => {
                        down_until = Some(Instant::now() + RETRY_AFTER);
                        counters.mirror_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
            }
            down_until = None;
            let Some(stream) = conn.as_mut() else {
                continue;
            };
            match self.exchange(stream, &job, &mut scratch) {
                Ok(keep_alive) => {
                    counters.mirrored.fetch_add(1, Ordering::Relaxed);
                    if !keep_alive {
                        conn = None;
                    }
                }
                Err(_) => {
                    counters.mirror_dropped.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
        }
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&self.addr, self.timeout)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(self.timeout))?;
        Ok(stream)
    }

    /// Sends one request and reads its response to the end; returns whether the connection
    /// can be used again.
    fn exchange(
        &self,
        stream: &mut TcpStream,
        job: &MirrorJob,
        scratch: &mut [u8],
    ) -> io::Result<bool> {
        let deadline = Instant::now() + self.timeout;
        stream.write_all(&job.bytes)?;
        let mut tracker = ResponseTracker::new(if job.head_request { "HEAD" } else { "GET" });
        while !tracker.is_complete() {
            let left = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
            stream.set_read_timeout(Some(left))?;
            let n = stream.read(scratch)?;
            if n == 0 {
                if tracker.finish_on_eof() {
                    return Ok(false);
                }
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let used = tracker
                .feed(&scratch[..n])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.0))?;
            if used < n {
                // Bytes after the response: the connection is out of step; start afresh.
                return Ok(false);
            }
        }
        Ok(tracker.keep_alive())
    }
}
