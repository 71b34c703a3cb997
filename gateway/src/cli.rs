//! The `gateway` command line, in the library so that `nfsgw-tools man` renders its
//! manual page from the same definition the binary parses (docs/operations.md).

use clap::{CommandFactory, Parser};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "gateway",
    version,
    about = "Polled-mode NFSv3 gateway to an object store",
    long_about = "Polled-mode NFS gateway: serves NFSv3, MOUNT v3 and NFSv4.1 over TCP and \
                  RPC-over-RDMA from an object store (a directory, memory or S3). SIGHUP \
                  re-reads the configuration; SIGTERM flushes staged writes and exits 0."
)]
pub struct Cli {
    /// Serve with this TOML configuration (SIGHUP re-reads it).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["check_config", "print_config"])]
    pub config: Option<PathBuf>,
    /// Validate this configuration and exit (0 = valid, 2 = not; the problem names the key).
    #[arg(long, value_name = "FILE", conflicts_with = "print_config")]
    pub check_config: Option<PathBuf>,
    /// Validate this configuration, print it as TOML with every default filled in and
    /// secrets redacted, and exit.
    #[arg(long, value_name = "FILE")]
    pub print_config: Option<PathBuf>,
}

/// The command as installed by the Debian package: `/usr/bin/nfsgw` (the binary is
/// built as `gateway`; the package and the manual page call it `nfsgw`).
pub fn command() -> clap::Command {
    Cli::command().name("nfsgw").bin_name("nfsgw")
}
