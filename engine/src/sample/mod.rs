//! The sample service (`sample-service`), its cache (`sample-cache`) and its synthetic
//! trace (`sample-trace`): a realistic service to test hairline against, with knobs that
//! make known regressions.
//!
//! `service` is the server. Each knob and model is a module of its own, which the server
//! uses and which uses nothing of the server: `cost` (what a request costs), `stages` (the
//! named functions the work runs through), `log`, `stall` and `ops` (the tunable and pause
//! knobs, the op endpoints), `metrics` (`/metrics`), `cache` (the dependency and the
//! service's client of it), `trace` (the trace generator); `flag` is the error their checks
//! share. Listening and the accept loop are `net::listen`'s.

pub mod cache;
pub mod cost;
pub mod flag;
pub mod handler;
pub mod log;
pub mod metrics;
pub mod ops;
pub mod service;
pub mod stages;
pub mod stall;
pub mod trace;
pub mod worker;
