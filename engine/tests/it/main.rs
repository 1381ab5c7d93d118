//! The engine's integration tests, in one binary: each test binary is linked with the release
//! profile's LTO, about 40 s of CPU apiece, so one binary for all of them keeps `make test`'s
//! Rust build short.

mod label_rules;
mod record;
