//! The event loop's claim on its CPU, and how long it waited for one.
//!
//! On a small machine the engine shares a CPU with a service under test. Left at the
//! default policy, a send that falls due while the service's thread is running waits for the
//! scheduler's next decision: measured on a 2-vCPU VM at 2 × 2,600 requests/s, 1.2-1.9% of
//! sends left the pacer more than 1 ms late (p99 1.2 ms, max 4.5 ms), which failed the late
//! gate in every batch of the demo. The same run with the loop at real-time priority
//! (`SCHED_FIFO` 1) left 0.1-0.3% late (p99 100-160 µs), and at nice -10 0.3-0.4%.
//!
//! So by default ([`PriorityMode::Auto`]) the loop's thread asks for `SCHED_FIFO` when it
//! sleeps between sends (`--spin-us 0`: it shares a CPU) and for nice -10 when it spins (a
//! real-time thread that spins most of a gap would meet the kernel's real-time throttling
//! and then stop for tens of milliseconds). Either needs `CAP_SYS_NICE` (root has it); a
//! thread refused both keeps the default and says so in the summary, which is what makes
//! a late gate that then fails readable.
//!
//! Only the calling thread is changed: the warm-up prober and the control reader stay at
//! the default policy.

use std::io;

use serde::Serialize;

/// What the loop's thread asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PriorityMode {
    /// Real-time when sleeping between sends, nice -10 when spinning; the default policy
    /// when neither is allowed.
    Auto,
    /// Real-time priority, else as `nice`.
    Fifo,
    /// nice -10, else the default.
    Nice,
    /// Leave the scheduling policy alone.
    Normal,
}

/// The policy the loop's thread got, for the summary.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Priority {
    /// `fifo`, `nice` or `normal`.
    pub policy: &'static str,
    /// Why it is that policy, in words.
    pub detail: String,
}

/// The real-time priority asked for: the lowest, so that anything the machine itself runs
/// at real-time priority still comes first.
const FIFO_PRIORITY: libc::c_int = 1;
/// The nice value asked for when real-time is refused or unwanted.
const NICE: libc::c_int = -10;

/// Applies `mode` to the calling thread. `spins`: the loop spins before due times.
pub fn apply(mode: PriorityMode, spins: bool) -> Priority {
    if mode == PriorityMode::Normal {
        return Priority {
            policy: "normal",
            detail: "--priority normal".into(),
        };
    }
    let wants_fifo = match mode {
        PriorityMode::Auto => !spins,
        PriorityMode::Fifo => true,
        PriorityMode::Nice | PriorityMode::Normal => false,
    };
    let fifo_error = if !wants_fifo {
        None
    } else {
        match set_fifo() {
            Ok(()) => {
                return Priority {
                    policy: "fifo",
                    detail: if spins {
                        format!("SCHED_FIFO {FIFO_PRIORITY}")
                    } else {
                        format!("SCHED_FIFO {FIFO_PRIORITY} (sleeps between sends)")
                    },
                }
            }
            Err(e) => Some(e),
        }
    };
    match set_nice() {
        Ok(()) => Priority {
            policy: "nice",
            detail: match fifo_error {
                Some(e) => format!("nice {NICE}; SCHED_FIFO refused: {e}"),
                None if mode == PriorityMode::Nice => format!("nice {NICE}"),
                None => format!("nice {NICE} (spins before due times)"),
            },
        },
        Err(e) => Priority {
            policy: "normal",
            detail: format!(
                "the default policy: nice {NICE} refused ({e}); give the engine \
                 CAP_SYS_NICE for sends on time beside a busy service"
            ),
        },
    }
}

fn set_fifo() -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: FIFO_PRIORITY,
    };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_nice() -> io::Result<()> {
    // SAFETY: plain syscall; with PRIO_PROCESS and who = the thread id, Linux changes only
    // this thread.
    let rc = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, NICE)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Nanoseconds the calling thread has spent runnable but waiting for a CPU
/// (`/proc/thread-self/schedstat`, second field); None where the kernel keeps no schedstat.
pub fn run_delay_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_run_delay(&text)
}

/// The second field of a schedstat line ("on-CPU ns, waiting ns, time slices"). Pure.
pub fn parse_run_delay(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_delay_is_the_second_field() {
        assert_eq!(parse_run_delay("123 456 7\n"), Some(456));
        assert_eq!(parse_run_delay("123"), None);
        assert_eq!(parse_run_delay("a b c"), None);
    }

    #[test]
    fn normal_changes_nothing() {
        let p = apply(PriorityMode::Normal, false);
        assert_eq!(p.policy, "normal");
    }

    #[test]
    fn this_thread_can_read_its_run_delay() {
        assert!(run_delay_ns().is_some());
    }
}
