//! Why the recorder did not start (exit 2): its flags, its output, or its listener.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error("--listen {addr}: cannot listen ({source}); pick a free port, or 0 for any")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("cannot write the trace header to {path}: {source}")]
    Header { path: PathBuf, source: io::Error },
    #[error("cannot start the recorder: {0}")]
    Io(#[from] io::Error),
}
