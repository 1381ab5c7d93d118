//! `hairline-engine load` (placeholder until the load engine lands).
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct LoadArgs {}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the load engine is not built yet")]
    Missing,
}

pub fn run(_args: LoadArgs) -> Result<ExitCode, LoadError> {
    Err(LoadError::Missing)
}
