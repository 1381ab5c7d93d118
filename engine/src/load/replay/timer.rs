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
        Ok(Timer { fd })
    }

    pub(super) fn arm_at(&self, at_ns: u64) -> io::Result<()> {
        let at_ns = at_ns.max(1); // an all-zero value would disarm the timer
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

    pub(super) fn drain(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer; EAGAIN is fine (nothing expired).
        unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), 8) };
    }
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
}
