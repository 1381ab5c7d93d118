//! The loop's clock and its alarm: CLOCK_MONOTONIC in ns, and a timerfd armed at absolute
//! deadlines on it (why a timerfd and not epoll's timeout: the loop's module doc).

use std::io;
use std::os::fd::RawFd;

/// Monotonic clock in ns (CLOCK_MONOTONIC, the clock the timerfd is armed against).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A timerfd armed at absolute CLOCK_MONOTONIC deadlines.
pub(super) struct Timer {
    pub(super) fd: RawFd,
    /// The deadline the timerfd is armed at and has not yet been seen to fire, if any.
    armed_ns: Option<u64>,
}

impl Timer {
    pub(super) fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Timer { fd, armed_ns: None })
    }

    /// Arms the timer at `at_ns`, unless it is armed there already. The loop turns several
    /// times per send (each response wakes it) and asks for the same deadline each time;
    /// on a VM every timerfd_settime reprograms the guest's timer through the hypervisor,
    /// which `perf record -e cpu-clock` on the engine at 2 x 8,000/s put at 19% of the
    /// engine's CPU (bench/RESULTS.md, issue #30).
    pub(super) fn arm_at(&mut self, at_ns: u64) -> io::Result<()> {
        let at_ns = at_ns.max(1); // an all-zero value would disarm the timer
        if needs_arming(self.armed_ns, at_ns) {
            self.settime(at_ns)?;
            self.armed_ns = Some(at_ns);
        }
        Ok(())
    }

    fn settime(&self, at_ns: u64) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec and `fd` a timerfd we own.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd,
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the expiry count after the timer fired; it must be armed again to fire again.
    pub(super) fn drain(&mut self) {
        self.armed_ns = None;
        let mut buf = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer; EAGAIN is fine (nothing expired).
        unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), 8) };
    }
}

/// Whether a timer armed at `armed_ns` (None: not armed, or fired) must be set again to
/// fire at `at_ns`. Only an identical deadline is kept: an earlier one would wake the loop
/// for nothing, a later one too late. Pure.
fn needs_arming(armed_ns: Option<u64>, at_ns: u64) -> bool {
    armed_ns != Some(at_ns)
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and close it once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
    }

    #[test]
    fn the_same_deadline_is_not_set_twice() {
        assert!(needs_arming(None, 5));
        assert!(!needs_arming(Some(5), 5));
        assert!(needs_arming(Some(5), 4));
        assert!(needs_arming(Some(5), 6));
    }

    #[test]
    fn a_timer_armed_again_after_it_fired_fires_again() {
        let mut timer = Timer::new().expect("timerfd");
        let fired = |t: &Timer| {
            let mut buf = [0u8; 8];
            // SAFETY: reading 8 bytes into an 8-byte buffer from a timerfd we own.
            unsafe { libc::read(t.fd, buf.as_mut_ptr().cast(), 8) == 8 }
        };
        let at = now_ns();
        timer.arm_at(at).expect("arm");
        std::thread::sleep(std::time::Duration::from_millis(2));
        timer.drain();
        // Drained: the same deadline must be set again (it is in the past: fires at once).
        timer.arm_at(at).expect("arm");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(fired(&timer), "a deadline armed again after draining did not fire");
    }
}
