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

use crate::net::http::ResponseTracker;
use crate::record::shared::{MirrorJob, Shared};

/// How long the mirror is left alone after a failed connect before the next attempt;
/// requests that come meanwhile are dropped at once rather than each waiting to fail.
const RETRY_AFTER: Duration = Duration::from_millis(200);
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Why a mirror request was not answered.
enum SendError {
    /// No connection: the mirror is down (or refusing); back off.
    Down,
    /// The exchange failed (timeout, reset, bad response).
    Failed,
}

pub struct MirrorWorker {
    pub shared: Arc<Shared>,
    pub rx: Receiver<MirrorJob>,
    pub addr: SocketAddr,
    pub timeout: Duration,
}

impl MirrorWorker {
    pub fn run(self) {
        self.serve();
        self.shared.mirror_workers.fetch_sub(1, Ordering::AcqRel);
    }

    /// Sends queued requests until the recording has stopped and the queue is empty; after
    /// the stop's deadline, what is still queued is counted as dropped, not sent.
    fn serve(&self) {
        let counters = &self.shared.counters;
        let mut conn: Option<TcpStream> = None;
        let mut down_until: Option<Instant> = None;
        let mut scratch = vec![0u8; 16 * 1024];
        loop {
            let job = match self.rx.recv_timeout(IDLE_WAIT) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    // Once the proxy threads are done, nothing more can be queued.
                    if self.shared.draining.load(Ordering::Acquire) && self.rx.is_empty() {
                        break;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let late = self
                .shared
                .mirror_deadline
                .get()
                .is_some_and(|t| Instant::now() >= *t);
            if late || down_until.is_some_and(|t| Instant::now() < t) {
                counters.mirror_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let in_flight = &self.shared.mirror_in_flight;
            in_flight.fetch_add(1, Ordering::AcqRel);
            let counter = match self.send(&mut conn, &job, &mut scratch) {
                Ok(()) => {
                    down_until = None;
                    &counters.mirrored
                }
                Err(SendError::Down) => {
                    down_until = Some(Instant::now() + RETRY_AFTER);
                    &counters.mirror_dropped
                }
                Err(SendError::Failed) => &counters.mirror_dropped,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Sends one job on the kept connection (or a new one); `Down` when no connection
    /// could be made.
    fn send(
        &self,
        conn: &mut Option<TcpStream>,
        job: &MirrorJob,
        scratch: &mut [u8],
    ) -> Result<(), SendError> {
        if conn.is_none() {
            *conn = Some(self.connect().map_err(|_| SendError::Down)?);
        }
        let Some(stream) = conn.as_mut() else {
            return Err(SendError::Failed);
        };
        match self.exchange(stream, job, scratch) {
            Ok(keep_alive) => {
                if !keep_alive {
                    *conn = None;
                }
                Ok(())
            }
            Err(_) => {
                *conn = None;
                Err(SendError::Failed)
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
