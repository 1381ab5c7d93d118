//! Why the egress proxy did not start, or could not write its stats (exit 2).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error("--netns {path}: cannot enter the namespace ({source}); create it with `ip netns add`, and run as root")]
    Netns { path: PathBuf, source: io::Error },
    #[error("--listen {addr}: cannot listen ({source}); pick a free port, or 0 for any")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("--stats {path}: cannot write ({source})")]
    Stats { path: PathBuf, source: io::Error },
    #[error("cannot start the egress proxy: {0}")]
    Io(#[from] io::Error),
}
