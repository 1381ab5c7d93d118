//! hairline's data plane.
//!
//! The binary `hairline-engine` is a thin shell over these modules; each subcommand's
//! arguments live beside its implementation so the library can be driven without the CLI.
//! Library code returns typed errors (`thiserror`); only `main.rs` speaks `anyhow`.

pub mod load;
pub mod sample_service;
