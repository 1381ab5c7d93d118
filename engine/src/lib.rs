//! hairline's data plane.
//!
//! The binary `hairline-engine` is a thin shell over these modules; each subcommand's
//! arguments live beside its implementation so the library can be driven without the CLI.
//! Library code returns typed errors (`thiserror`); only `main.rs` speaks `anyhow`.
//!
//! One folder per job: `load` (the load generator), `record` (the recording proxy),
//! `egress` (the egress proxy), `sample` (the sample service and its cache), over two
//! shared floors that depend on none of them: `net` (HTTP/1.1, sockets, listening) and
//! `format` (the files the engine reads and writes).

pub mod egress;
pub mod format;
pub mod load;
pub mod net;
pub mod record;
pub mod sample;
