//! Small pieces of blocking-socket handling that the proxies (the recorder's and the egress
//! proxy) share: waiting for a listener, telling a read timeout from a failure, and saying
//! why a connection could not be made.

use std::io;
use std::time::Duration;

/// Waits up to `timeout` for `fd` to be readable (for a listener: a connection to accept).
pub fn wait_readable(fd: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `pfd` is a valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// Whether a read failed only because its timeout passed (the socket may be read again).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Why a connection could not be made, in the words a 502's body gives.
pub fn connect_message(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused",
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "connect timed out",
        _ => "cannot connect",
    }
}
