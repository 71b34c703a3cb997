//! The gateway under test: the real binary, started with a temporary config (fs
//! backend in a fresh directory, TCP and the stats endpoint on free loopback ports,
//! RDMA off unless campaign `rdma` runs: then the `soft` provider on a free port), its log captured to a file that the campaigns scan for `panicked`.

use crate::fetch;
use crate::metrics::Scrape;
use anyhow::{bail, Context};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running gateway; SIGTERM (then SIGKILL after 10 s) when dropped.
pub struct Gateway {
    child: Child,
    pub dir: PathBuf,
    pub addr: String,
    pub stats_url: String,
    /// The `soft` RDMA listener, when campaign `rdma` runs.
    pub rdma: Option<std::net::SocketAddr>,
    pub log: PathBuf,
    /// How much of the log has been scanned for panics.
    log_seen: u64,
}

use crate::child::free_port;

/// The campaign's config. `record_timeout_s = 2` (campaign::RECORD_TIMEOUT) so connections left holding a
/// partial record are reaped during the campaign; a small read cache keeps RSS bounds
/// meaningful.
/// With RDMA (campaign `rdma`): few credits (bursts past them stay short), and read and
/// send timeouts of 2 s so that peers which stop polling are closed within the campaign.
fn config(
    dir: &Path,
    port: u16,
    stats: u16,
    cores: &[usize],
    cache_mib: u64,
    rdma: Option<u16>,
) -> String {
    let cores: Vec<String> = cores.iter().map(usize::to_string).collect();
    let cores = cores.join(", ");
    let rdma = match rdma {
        None => "provider = \"off\"".to_string(),
        Some(p) => format!(
            "provider = \"soft\"\nlisten = \"127.0.0.1:{p}\"\ncredits = {}\nread_timeout_s = {t}\nsend_timeout_s = {t}",
            super::rdmarun::CREDITS,
            t = super::rdmarun::RDMA_TIMEOUT.as_secs()
        ),
    };
    format!(
        "[engine]\ncores = [{cores}]\nidle = \"adaptive\"\nhugepages = \"auto\"\n\n\
         [tcp]\nlisten = \"127.0.0.1:{port}\"\nrecord_timeout_s = 2\n\n\
         [rdma]\n{rdma}\n\n\
         [backend]\nkind = \"fs\"\nroot = \"{data}\"\nworkers = 2\n\n\
         [cache]\nsize_mib = {cache_mib}\n\n\
         [state]\ndir = \"{state}\"\n\n\
         [stats]\nlisten = \"127.0.0.1:{stats}\"\n\n\
         [[exports]]\npath = \"/\"\nclients = [\"127.0.0.0/8\"]\naccess = \"rw\"\nsquash = \"none\"\n",
        data = dir.join("data").display(),
        state = dir.join("state").display(),
    )
}

impl Gateway {
    /// Starts `bin` in a fresh directory under `parent` and waits until it serves.
    pub fn start(
        bin: &Path,
        parent: &Path,
        cores: &[usize],
        cache_mib: u64,
        rdma: bool,
    ) -> anyhow::Result<Gateway> {
        let dir = parent.join(format!("nfsgw-fuzz-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).ok();
        }
        std::fs::create_dir_all(dir.join("data"))?;
        std::fs::create_dir_all(dir.join("state"))?;
        let (port, stats) = (free_port()?, free_port()?);
        let rdma_port = if rdma { Some(free_port()?) } else { None };
        let cfg = dir.join("gateway.toml");
        std::fs::write(&cfg, config(&dir, port, stats, cores, cache_mib, rdma_port))?;
        let log = dir.join("gateway.log");
        let child = Command::new(bin)
            .arg("--config")
            .arg(&cfg)
            // `NFSGW_FUZZ_RUST_LOG` (e.g. `info,engine::rdma=debug`) to look closer at a
            // failure.
            .env(
                "RUST_LOG",
                std::env::var("NFSGW_FUZZ_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("gateway.stdout"))?)
            .stderr(File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut g = Gateway {
            child,
            dir,
            addr: format!("127.0.0.1:{port}"),
            stats_url: format!("http://127.0.0.1:{stats}/metrics"),
            rdma: rdma_port.map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p))),
            log,
            log_seen: 0,
        };
        let start = Instant::now();
        loop {
            if std::net::TcpStream::connect(&g.addr).is_ok() && g.scrape().is_ok() {
                return Ok(g);
            }
            if let Some(st) = g.child.try_wait()? {
                bail!(
                    "gateway exited during start-up ({st}); log:\n{}",
                    g.log_tail(20)
                );
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("gateway not serving after 60 s; log:\n{}", g.log_tail(20));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(st.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("wait failed: {e}")),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let t = self.log_text();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Log lines written since the last call that mention a panic.
    pub fn new_panics(&mut self) -> Vec<String> {
        let Ok(bytes) = std::fs::read(&self.log) else {
            return Vec::new();
        };
        let from = (self.log_seen as usize).min(bytes.len());
        self.log_seen = bytes.len() as u64;
        String::from_utf8_lossy(&bytes[from..])
            .lines()
            .filter(|l| l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }

    pub fn scrape(&self) -> anyhow::Result<Scrape> {
        let text = fetch::get(&self.stats_url, Duration::from_secs(5))?;
        Ok(Scrape::parse(&text))
    }

    /// Resident set size in KiB, from /proc.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS in /proc status")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        crate::child::stop(&mut self.child, Duration::from_secs(10));
    }
}
