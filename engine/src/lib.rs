//! hairline's data plane.
//!
//! The binary `hairline-engine` is a thin shell over these modules; each subcommand's
//! arguments live beside its implementation so the library can be driven without the CLI.
//! Library code returns typed errors (`thiserror`); only `main.rs` speaks `anyhow`.

pub mod client;
pub mod egress;
pub mod histogram;
pub mod http;
pub mod load;
pub mod output;
pub mod pace;
pub mod priority;
pub mod record;
pub mod recv_stamp;
pub mod replay;
pub mod request_log;
pub mod sample_cache;
pub mod sample_cost;
pub mod sample_log;
pub mod sample_metrics;
pub mod sample_ops;
pub mod sample_service;
pub mod sample_stages;
pub mod sample_stall;
pub mod sample_trace;
pub mod sockets;
pub mod trace;
pub mod validity;
