//! The files the engine reads and writes: the JSONL trace, the `--requests` records, and
//! outputs put in place only when complete.

pub mod output;
pub mod request_log;
pub mod trace;
