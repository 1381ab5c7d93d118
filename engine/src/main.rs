//! `hairline-engine`: the load generator, recorder and sample service behind hairline.
//!
//! Exit codes: 0 success, 1 the run finished but a validity gate failed under `--strict`,
//! 2 bad input or a runtime failure.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use hairline_engine::{egress, load, record, sample};

#[derive(Parser)]
#[command(name = "hairline-engine", version, about = "hairline's data plane")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay one open-loop request stream to every target in lockstep.
    Load(load::LoadArgs),
    /// Record live traffic: a reverse proxy that writes a sample of requests as a trace.
    Record(record::RecordArgs),
    /// Serve a realistic service with heavy-tailed request costs and regression knobs.
    SampleService(sample::service::SampleServiceArgs),
    /// Serve a memcached-like cache of limited capacity, a dependency for sample services.
    SampleCache(sample::cache::SampleCacheArgs),
    /// Write a synthetic JSONL trace for the sample service (endpoint mix, Zipf users).
    SampleTrace(sample::trace::SampleTraceArgs),
    /// Proxy a service's calls to one downstream: forward reads, answer writes here.
    Egress(egress::EgressArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome: anyhow::Result<ExitCode> = match cli.command {
        Command::Load(args) => load::run(args).map_err(anyhow::Error::from),
        Command::Record(args) => record::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::SampleService(args) => sample::service::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::SampleCache(args) => sample::cache::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::SampleTrace(args) => sample::trace::run_trace(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::Egress(args) => egress::run(args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("hairline-engine: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
