//! Why a load run failed (exit 2): its flags, the trace, an output, or the run itself.

use std::path::PathBuf;

use crate::format::trace::TraceError;
use crate::load::replay::ReplayError;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot install the signal handler: {0}")]
    Signal(std::io::Error),
    #[error(transparent)]
    Replay(#[from] ReplayError),
}
