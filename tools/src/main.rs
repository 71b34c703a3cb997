//! `nfsgw-tools`: operator tools for the gateway.
//!
//! - `top`: a live terminal view of a gateway's stats endpoint (`[stats] listen`).
//! - `fuzz`: seeded fuzz campaigns against the real gateway binary (docs/fuzzing.md).
//! - `sweep`: start the gateway with each variant of a config, run `bench` against
//!   each, print a table and a plot, write the best variant as a config.
//! - `man`, `completions`: manual pages and shell completions for the Debian package.

mod benchjson;
mod child;
mod fetch;
mod fuzz;
mod manpages;
mod metrics;
mod plot;
mod sweep;
mod top;
mod variants;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "nfsgw-tools",
    version,
    about = "Gateway stats view and tuning sweeps"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Live per-reactor view of a gateway's /metrics (busy %, ops/s, MiB/s, p99, pools).
    Top(top::TopArgs),
    /// Seeded fuzz campaigns over TCP against a gateway it starts (docs/fuzzing.md).
    Fuzz(fuzz::FuzzArgs),
    /// Benchmark every variant of a config and write the best one.
    Sweep(sweep::SweepArgs),
    /// Write the manual pages of nfsgw and nfsgw-tools (roff, section 1) into DIR.
    Man(manpages::ManArgs),
    /// Print a shell completion script for nfsgw-tools.
    Completions(manpages::CompletionsArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Top(a) => top::run(&a),
        Cmd::Sweep(a) => sweep::run(&a),
        Cmd::Fuzz(a) => fuzz::run(&a),
        Cmd::Man(a) => manpages::man(&a, Cli::command()),
        Cmd::Completions(a) => manpages::completions(&a, Cli::command()),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfsgw-tools: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
