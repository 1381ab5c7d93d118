//! `hairline-engine load`: command-line arguments (`args`) become a validated plan once
//! (`plan`, `targets`); `replay` runs it; the summary, request records and HDR log are
//! written from here.
//!
//! Exit codes: 0 done, 1 a validity gate failed and `--strict` was given, 2 an error
//! (returned as [`LoadError`]).

pub mod args;
pub mod client;
pub mod histogram;
pub mod pace;
pub mod plan;
pub mod priority;
pub mod replay;
pub mod summary;
pub mod targets;
pub mod validity;

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::format::output::Staged;
use crate::format::request_log;
pub use args::{ArrivalArg, LoadArgs, PaceArg};
use plan::{build_plan, PlanError};
use replay::{ReplayError, Sinks};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The flags or the trace: nothing was sent.
    #[error(transparent)]
    Plan(#[from] PlanError),
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

pub fn run(args: LoadArgs) -> Result<ExitCode, LoadError> {
    let plan = build_plan(&args)?;
    if args.check {
        return Ok(ExitCode::SUCCESS);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(LoadError::Signal)?;
    }
    // Every output is created before the run, so that a bad path fails in a second rather
    // than after the whole run, and is put in place only when the run has succeeded.
    let create = |path: &PathBuf| {
        Staged::create(path)
            .map(|(staged, f)| (staged, BufWriter::with_capacity(1 << 20, f)))
            .map_err(|source| LoadError::Create {
                path: path.clone(),
                source,
            })
    };
    let mut staged: Vec<Staged> = Vec::new();
    let mut sinks = Sinks::default();
    if let Some(path) = &args.requests {
        let (file, mut w) = create(path)?;
        staged.push(file);
        request_log::write_header(&mut w).map_err(|source| LoadError::Write {
            path: path.clone(),
            source,
        })?;
        sinks.requests = Some(w);
    }
    if let Some(path) = &args.hdr_log {
        let (file, w) = create(path)?;
        staged.push(file);
        sinks.hdr_log = Some(w);
    }
    let summary_file = match &args.summary {
        Some(path) => Some(create(path)?),
        None => None,
    };
    // The sinks are flushed and closed by the time the run returns.
    let summary = replay::run(&plan, sinks, stop)?;
    let valid = summary.valid;
    match (summary_file, &args.summary) {
        (Some((file, mut w)), Some(path)) => {
            serde_json::to_writer_pretty(&mut w, &summary)
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"))
                .and_then(|()| w.flush())
                .map_err(|source| LoadError::Write {
                    path: path.clone(),
                    source,
                })?;
            // Last, so that a summary in place means the other outputs are too.
            staged.push(file);
        }
        _ => {
            let mut out = std::io::stdout().lock();
            let text = if args.control {
                // Under --control stdout is a stream of JSON lines; the summary is the last.
                serde_json::to_string(&summary)
            } else {
                serde_json::to_string_pretty(&summary)
            };
            let text = text.map_err(|e| LoadError::Write {
                path: "<stdout>".into(),
                source: e.into(),
            })?;
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .map_err(|source| LoadError::Write {
                    path: "<stdout>".into(),
                    source,
                })?;
        }
    }
    for file in staged {
        let path = file.path().to_owned();
        file.commit()
            .map_err(|source| LoadError::Write { path, source })?;
    }
    if args.strict && !valid {
        eprintln!("hairline-engine: the run failed a validity gate (see \"gates\" in the summary)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
