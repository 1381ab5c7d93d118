//! Reads that say when their bytes arrived: the kernel's receive timestamp (`SO_TIMESTAMPNS`).
//!
//! A request that waits in the socket's receive buffer while its worker is busy with other
//! connections has been queueing since the kernel received it, not since the worker read it;
//! the sample service's `sample_queue_seconds` needs the former. Linux delivers the
//! timestamp of the last segment a TCP `recvmsg` consumed as an `SCM_TIMESTAMPNS` control
//! message once the socket option is set (loopback included). Where it is not delivered,
//! the read's own time stands in, and the [`Arrival`] says so: its caller counts those
//! requests (`sample_queue_unstamped_total`), since their queueing is then under-measured
//! and a capacity read from it over-estimated.

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::time::{SystemTime, UNIX_EPOCH};

/// Asks the kernel to timestamp the socket's received data; its refusal as the OS error.
pub fn enable(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: the option value is a c_int that lives across the call, with its size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Now, in nanoseconds since the Unix epoch (the kernel's timestamps are on this clock).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// When a read's bytes arrived, and whether the kernel said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Arrival {
    /// Unix nanoseconds.
    pub unix_ns: u64,
    /// False when the kernel gave no receive timestamp and the read's own time stands in:
    /// any wait in the socket's receive buffer before the read is then invisible, so a
    /// queue time measured from it is too short.
    pub from_kernel: bool,
}

impl Arrival {
    fn of(stamp: Option<u64>) -> Arrival {
        match stamp {
            Some(unix_ns) => Arrival {
                unix_ns,
                from_kernel: true,
            },
            None => Arrival {
                unix_ns: unix_now_ns(),
                from_kernel: false,
            },
        }
    }
}

/// `read` with the arrival of the bytes read: the kernel's timestamp when the socket
/// carries one, else now (marked as such). Errors as `read`'s (`WouldBlock` on a
/// non-blocking socket).
pub fn recv(fd: RawFd, buffer: &mut [u8]) -> io::Result<(usize, Arrival)> {
    let (n, stamp) = recv_kernel_stamped(fd, buffer)?;
    Ok((n, Arrival::of(stamp)))
}

/// `read` with the kernel's receive timestamp of the bytes read, `None` when it gave none:
/// some kernels and sandboxes accept `SO_TIMESTAMPNS` on TCP yet never deliver it.
pub fn recv_kernel_stamped(fd: RawFd, buffer: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    // Room for one timespec control message, aligned as cmsghdr wants.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control) as _;
    // SAFETY: iov points into `buffer` and msg_control into `control`, both live and
    // writable for the lengths given, for the duration of the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, kernel_stamp_ns(&msg)))
}

fn kernel_stamp_ns(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: msg was filled by recvmsg; the CMSG macros walk within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let header = &*cmsg;
            if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                let ns = u64::try_from(ts.tv_sec).ok()? * 1_000_000_000
                    + u64::try_from(ts.tv_nsec).ok()?;
                // A zero stamp means the segment was never stamped.
                return (ns > 0).then_some(ns);
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn bytes_that_waited_in_the_buffer_carry_their_arrival_time() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable(server.as_raw_fd()).unwrap();
        // The first socket on a machine to ask for stamps switches the kernel's stamping on
        // through deferred work, so the first segments after it may go unstamped: a fresh
        // CI machine showed it. Later rounds are stamped.
        for _round in 0..5 {
            let sent_ns = unix_now_ns();
            client.write_all(b"hello").unwrap();
            thread::sleep(Duration::from_millis(50));
            let mut buffer = [0u8; 16];
            let (n, stamp) = recv_kernel_stamped(server.as_raw_fd(), &mut buffer).unwrap();
            let read_ns = unix_now_ns();
            assert_eq!(&buffer[..n], b"hello");
            let Some(arrived_ns) = stamp else { continue };
            // The kernel's stamp is from the write, not the read 50 ms later.
            assert!(arrived_ns >= sent_ns, "{arrived_ns} < {sent_ns}");
            assert!(
                read_ns - arrived_ns >= 40_000_000,
                "stamped {} ms before the read",
                (read_ns - arrived_ns) as f64 / 1e6
            );
            return;
        }
        panic!("five rounds, and the kernel stamped none of them");
    }

    #[test]
    fn without_a_kernel_stamp_the_read_time_stands_in() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // The option is never enabled, so no stamp arrives.
        let (server, _) = listener.accept().unwrap();
        client.write_all(b"hi").unwrap();
        thread::sleep(Duration::from_millis(20));
        let mut buffer = [0u8; 16];
        let before_ns = unix_now_ns();
        let (n, arrival) = recv(server.as_raw_fd(), &mut buffer).unwrap();
        let after_ns = unix_now_ns();
        assert_eq!(&buffer[..n], b"hi");
        // Said to be the read's time, so that the request is counted as unstamped.
        assert!(!arrival.from_kernel);
        let arrived_ns = arrival.unix_ns;
        assert!(
            (before_ns..=after_ns).contains(&arrived_ns),
            "{before_ns} <= {arrived_ns} <= {after_ns}"
        );
    }

    #[test]
    fn a_kernel_stamped_read_says_it_came_from_the_kernel() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable(server.as_raw_fd()).unwrap();
        // As above: the first segments after stamping is switched on may go unstamped.
        for _round in 0..5 {
            client.write_all(b"x").unwrap();
            thread::sleep(Duration::from_millis(20));
            let mut buffer = [0u8; 16];
            let (n, arrival) = recv(server.as_raw_fd(), &mut buffer).unwrap();
            assert_eq!(n, 1);
            if arrival.from_kernel {
                assert!(arrival.unix_ns > 0);
                return;
            }
        }
        panic!("five rounds, and no read was marked as stamped by the kernel");
    }
}
