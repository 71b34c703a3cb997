//! `nfsgw-tools man DIR` and `nfsgw-tools completions SHELL`: the manual pages and shell
//! completions the Debian package installs (tools/package/build-deb.sh), rendered from
//! the same clap definitions the binaries parse, so they cannot drift from `--help`.

use anyhow::{Context, Result};
use clap::{Args, Command};
use clap_complete::Shell;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ManArgs {
    /// Directory to write the section-1 pages into (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
    /// Write into this directory (under the shell's conventional file name) instead of stdout.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Writes `nfsgw.1`, `nfsgw-tools.1` and one page per `nfsgw-tools` subcommand.
pub fn man(a: &ManArgs, tools: Command) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    render_tree(gateway::cli::command(), &a.dir)?;
    render_tree(tools, &a.dir)
}

/// clap_mangen's `generate_to` writes the page of `cmd` and of every subcommand
/// (`nfsgw-tools-top.1`, ...), each with its own SYNOPSIS and OPTIONS.
fn render_tree(cmd: Command, dir: &Path) -> Result<()> {
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("writing pages to {}", dir.display()))
}

pub fn completions(a: &CompletionsArgs, mut tools: Command) -> Result<()> {
    let name = tools.get_name().to_string();
    match &a.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            let path = clap_complete::generate_to(a.shell, &mut tools, name, dir)?;
            eprintln!("wrote {}", path.display());
        }
        None => clap_complete::generate(a.shell, &mut tools, name, &mut std::io::stdout()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_for_both_commands_and_each_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let tools = Command::new("nfsgw-tools").subcommand(Command::new("top").about("view"));
        man(
            &ManArgs {
                dir: dir.path().into(),
            },
            tools,
        )
        .unwrap();
        for page in ["nfsgw.1", "nfsgw-tools.1", "nfsgw-tools-top.1"] {
            let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
            assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{page}: not roff");
        }
        let gw = std::fs::read_to_string(dir.path().join("nfsgw.1")).unwrap();
        assert!(
            gw.contains("\\-\\-check\\-config"),
            "options missing from nfsgw.1"
        );
    }
}
