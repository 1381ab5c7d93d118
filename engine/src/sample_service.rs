//! `hairline-engine sample-service` (placeholder until the sample service lands).

#[derive(clap::Args, Debug)]
pub struct SampleServiceArgs {}

#[derive(Debug, thiserror::Error)]
pub enum SampleServiceError {
    #[error("the sample service is not built yet")]
    Missing,
}

pub fn run(_args: SampleServiceArgs) -> Result<(), SampleServiceError> {
    Err(SampleServiceError::Missing)
}
