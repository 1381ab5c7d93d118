//! The warm-up phase's end: every `--warm-url` answered 2xx (probed on a thread of its own)
//! and `--warmup-duration` passed, or `--warm-timeout` reached with a target still cold.

use std::io::{self, Read as _};
use std::net::TcpStream as StdTcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::Waker;

use super::{Engine, ReplayError};
use crate::load::pace::Pacer;
use crate::load::plan::WarmProbe;
use crate::net::http::ResponseTracker;

impl Engine<'_> {
    /// Starts the measurement once the warm-up is over; fails when a target is still not
    /// warm at `--warm-timeout` (`t0` is when the warm-up began).
    pub(super) fn end_warmup_when_due(
        &mut self,
        pacer: &mut Pacer,
        t0: u64,
        now: u64,
        warm_flags: &[AtomicBool],
    ) -> Result<(), ReplayError> {
        let plan = self.plan;
        let all_warm = warm_flags.iter().all(|f| f.load(Ordering::Relaxed));
        if now >= t0 + plan.warmup_ns && all_warm {
            self.start_measurement(pacer, now)?;
        } else if !all_warm && now >= t0 + plan.warm_timeout_ns {
            let detail = plan
                .warm_probes
                .iter()
                .zip(warm_flags)
                .filter(|(_, f)| !f.load(Ordering::Relaxed))
                .map(|(p, _)| {
                    format!(
                        "{} ({} never answered 2xx)",
                        plan.targets[p.target].name, p.url
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ReplayError::NeverWarm {
                timeout_s: plan.warm_timeout_ns as f64 / 1e9,
                detail,
            });
        }
        Ok(())
    }
}

/// target never stalls the event loop.
pub(super) fn spawn_warm_prober(
    probes: Vec<WarmProbe>,
    flags: Arc<Vec<AtomicBool>>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let mut all = true;
            for (i, p) in probes.iter().enumerate() {
                if flags[i].load(Ordering::Relaxed) {
                    continue;
                }
                if probe_once(p) {
                    flags[i].store(true, Ordering::Relaxed);
                    let _ = waker.wake();
                } else {
                    all = false;
                }
            }
            if all {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

fn probe_once(p: &WarmProbe) -> bool {
    let timeout = Duration::from_secs(1);
    let Ok(mut s) = StdTcpStream::connect_timeout(&p.addr, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        p.path, p.host
    );
    if io::Write::write_all(&mut s, req.as_bytes()).is_err() {
        return false;
    }
    // Only the status matters: read until the head of the final response is in.
    let mut tracker = ResponseTracker::for_request(false);
    let mut buf = [0u8; 1024];
    while tracker.final_head().is_none() {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                if tracker.feed(&buf[..n]).is_err() {
                    return false;
                }
            }
        }
    }
    tracker
        .final_head()
        .is_some_and(|(status, _)| (200..300).contains(&status))
}
