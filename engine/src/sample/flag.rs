//! A flag of the sample service, its cache or its trace generator refused: the one error
//! each of their checks returns, naming the flag, its value and what to write instead.

/// `--{flag} {value} is invalid: {hint}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--{flag} {value} is invalid: {hint}")]
pub struct BadFlag {
    pub flag: &'static str,
    pub value: String,
    pub hint: &'static str,
}
