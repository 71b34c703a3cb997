//! `[pnfs]`: the pNFS metadata server role with the flexible files layout (RFC 8435).
//! Off by default. When on, NFSv4.1 clients get layouts that send their READs and
//! WRITEs over NFSv3 straight to the data servers listed here: the gateways on the
//! same bucket (this one may be among them), each of which resolves every other's
//! file handles (README "Scaling out with pNFS"). Read at start only: a change needs
//! a restart (`reload.rs` names it).

use super::*;

/// The transport a data server is reached by (netaddr4's na_r_netid, RFC 5665 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DsNetid {
    Tcp,
    Rdma,
}

/// One data server: a gateway serving NFSv3 on the same store.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataServerConfig {
    /// "ip:port" of its NFSv3 listener (`tcp.listen` or `rdma.listen` of that
    /// gateway) as clients reach it; a literal address, not a host name (clients
    /// receive it as a universal address, RFC 5665 §5.2.3).
    pub address: String,
    /// "tcp" (default) or "rdma".
    #[serde(default = "default_netid")]
    pub netid: DsNetid,
    /// "ip:port" where the metadata server probes it with an NFSv3 NULL over TCP
    /// (`probe_ms`): its `address` by default for netid "tcp"; a data server reached
    /// over RDMA needs its TCP listener named here to be probed (else it is never
    /// marked down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_address: Option<String>,
}

fn default_netid() -> DsNetid {
    DsNetid::Tcp
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PnfsConfig {
    /// Be a pNFS metadata server (EXCHGID4_FLAG_USE_PNFS_MDS, LAYOUTGET, ...).
    #[serde(default)]
    pub enabled: bool,
    /// The data servers layouts name; files are spread across them by file id.
    #[serde(default)]
    pub data_servers: Vec<DataServerConfig>,
    /// ffl_stripe_unit and the layout_blksize attribute, bytes (RFC 8435 §5.1).
    #[serde(default = "default_stripe_unit")]
    pub stripe_unit: u32,
    /// ffdv_rsize / ffdv_wsize offered for the data servers (RFC 8435 §5.1): the
    /// largest NFSv3 READ and WRITE a client sends them.
    #[serde(default = "default_io_size")]
    pub rsize: u32,
    #[serde(default = "default_io_size")]
    pub wsize: u32,
    /// Mirrors a READ layout offers (each a different data server; any can serve any
    /// file). RW layouts always have one: a client must never write twice.
    #[serde(default = "default_read_mirrors")]
    pub read_mirrors: u32,
    /// Data servers one striped mirror names (RFC 8435 §6: stripe i of the file, at
    /// its own offsets, goes to the (i mod width)-th): 1, the default, stripes nothing.
    /// Only clients named in `stripe_clients` get striped layouts, and RW layouts only
    /// where the store writes in place (`fs` with `shared = true`); README "Scaling
    /// out with pNFS", "Striping".
    #[serde(default = "default_stripe_width")]
    pub stripe_width: u32,
    /// The client implementations (EXCHANGE_ID's eia_client_impl_id nii_name, RFC 8881
    /// §18.35.3, matched exactly) known to accept a mirror of several data servers.
    /// The Linux client (6.1) refuses one, so it is not named; the default is bench's.
    #[serde(default = "default_stripe_clients")]
    pub stripe_clients: Vec<String>,
    /// Fencing (RFC 8435 §2.2; README "Scaling out with pNFS"): layouts carry
    /// synthetic AUTH_SYS ids (bit 31 set) that every gateway on the store checks
    /// against the file's fence epoch. On every gateway, metadata or data server; on
    /// by default where the store has conditional writes. With it on, AUTH_SYS uids
    /// of 2^31 and above are reserved for layouts.
    #[serde(default = "default_fence")]
    pub fence: bool,
    /// How often the metadata server sends each data server an NFSv3 NULL, ms (0: no
    /// probing, every data server is always taken as up). README "Scaling out with
    /// pNFS": a data server that fails `probe_failures` probes in a row is left out
    /// of new layouts and the layouts naming it are recalled; one answered probe
    /// brings it back.
    #[serde(default = "default_probe_ms")]
    pub probe_ms: u64,
    /// How long one probe may take (connect, send, reply), ms.
    #[serde(default = "default_probe_timeout_ms")]
    pub probe_timeout_ms: u64,
    /// Consecutive failed probes that mark a data server down.
    #[serde(default = "default_probe_failures")]
    pub probe_failures: u32,
}

fn default_fence() -> bool {
    true
}
fn default_probe_ms() -> u64 {
    1000
}
fn default_probe_timeout_ms() -> u64 {
    500
}
fn default_probe_failures() -> u32 {
    3
}

/// Most data servers one metadata server names: bounds a layout's and a device
/// list's reply (`nfs4::layout_ops`, sized by the COMPOUND's plan).
pub const MAX_DATA_SERVERS: usize = 64;
/// Most mirrors in a READ layout.
pub const MAX_READ_MIRRORS: u32 = 8;
/// Most data servers a striped mirror names.
pub const MAX_STRIPE_WIDTH: u32 = 16;
/// Most ff_data_server4 entries in one layout, all mirrors together: a striped read
/// layout has fewer mirrors (bounds LAYOUTGET's reply, `nfs4::layout_ops::LAYOUT_MAX`).
pub const MAX_LAYOUT_SERVERS: usize = 16;
/// Most names in `stripe_clients`, and the longest (EXCHANGE_ID's nii_name is read up
/// to this many bytes).
pub const MAX_STRIPE_CLIENTS: usize = 16;
pub const MAX_IMPL_NAME: usize = 1024;

fn default_stripe_unit() -> u32 {
    1 << 20
}
fn default_io_size() -> u32 {
    crate::limits::MAX_IO as u32
}
fn default_read_mirrors() -> u32 {
    1
}
fn default_stripe_width() -> u32 {
    1
}
fn default_stripe_clients() -> Vec<String> {
    vec![nfs_wire::nfs4args::BENCH_IMPL_NAME.to_string()]
}

impl Default for PnfsConfig {
    fn default() -> Self {
        PnfsConfig {
            enabled: false,
            data_servers: Vec::new(),
            stripe_unit: default_stripe_unit(),
            rsize: default_io_size(),
            wsize: default_io_size(),
            read_mirrors: default_read_mirrors(),
            stripe_width: default_stripe_width(),
            stripe_clients: default_stripe_clients(),
            fence: default_fence(),
            probe_ms: default_probe_ms(),
            probe_timeout_ms: default_probe_timeout_ms(),
            probe_failures: default_probe_failures(),
        }
    }
}

impl PnfsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |k: &str, why: String| Err(ConfigError(format!("pnfs.{k}: {why}")));
        if self.data_servers.len() > MAX_DATA_SERVERS {
            return bad("data_servers", format!("at most {MAX_DATA_SERVERS}"));
        }
        for (i, d) in self.data_servers.iter().enumerate() {
            if d.address.parse::<SocketAddr>().is_err() {
                return bad(
                    &format!("data_servers[{i}].address"),
                    format!(
                        "\"{}\" is not an ip:port such as \"10.0.0.2:2049\" (no host names)",
                        d.address
                    ),
                );
            }
            if let Some(p) = &d.probe_address {
                if p.parse::<SocketAddr>().is_err() {
                    return bad(
                        &format!("data_servers[{i}].probe_address"),
                        format!("\"{p}\" is not an ip:port (its TCP listener)"),
                    );
                }
            }
            let same = |e: &DataServerConfig| e.address == d.address && e.netid == d.netid;
            if self.data_servers[..i].iter().any(same) {
                return bad(
                    &format!("data_servers[{i}]"),
                    format!("\"{}\" ({:?}) is listed twice", d.address, d.netid),
                );
            }
        }
        if self.enabled && self.data_servers.is_empty() {
            return bad(
                "data_servers",
                "enabled = true needs at least one, e.g. \
                 [[pnfs.data_servers]] address = \"10.0.0.2:2049\""
                    .into(),
            );
        }
        let max = crate::limits::MAX_IO as u32;
        for (k, v) in [("rsize", self.rsize), ("wsize", self.wsize)] {
            if !(4096..=max).contains(&v) || !v.is_multiple_of(4096) {
                return bad(k, format!("must be a multiple of 4096 in 4096..={max}"));
            }
        }
        if !(4096..=1 << 30).contains(&self.stripe_unit) || !self.stripe_unit.is_multiple_of(4096) {
            return bad(
                "stripe_unit",
                "must be a multiple of 4096 in 4096..=1073741824 bytes".into(),
            );
        }
        if self.probe_ms > 3_600_000 {
            return bad("probe_ms", "must be 0 (off) or at most 3600000".into());
        }
        if !(10..=60_000).contains(&self.probe_timeout_ms) {
            return bad("probe_timeout_ms", "must be in 10..=60000".into());
        }
        if !(1..=1000).contains(&self.probe_failures) {
            return bad("probe_failures", "must be in 1..=1000".into());
        }
        if !(1..=MAX_READ_MIRRORS).contains(&self.read_mirrors) {
            return bad(
                "read_mirrors",
                format!("must be 1..={MAX_READ_MIRRORS} (more than the data servers is cut)"),
            );
        }
        self.validate_stripes()
    }

    /// `stripe_width` and `stripe_clients`. The stripe unit is at most 1 GiB (above)
    /// and the width at most `MAX_STRIPE_WIDTH`, so a stripe (width × unit, RFC 8435
    /// §6) is below 2^35 and no offset arithmetic on them overflows a u64.
    fn validate_stripes(&self) -> Result<(), ConfigError> {
        let bad = |k: &str, why: String| Err(ConfigError(format!("pnfs.{k}: {why}")));
        let n = self.data_servers.len();
        if !(1..=MAX_STRIPE_WIDTH).contains(&self.stripe_width) {
            return bad(
                "stripe_width",
                format!("must be 1 (no striping) ..={MAX_STRIPE_WIDTH}"),
            );
        }
        if self.stripe_width > 1 && self.stripe_width as usize > n {
            return bad(
                "stripe_width",
                format!(
                    "{} is more than the {n} data server(s) listed",
                    self.stripe_width
                ),
            );
        }
        if self.stripe_clients.len() > MAX_STRIPE_CLIENTS {
            return bad(
                "stripe_clients",
                format!("at most {MAX_STRIPE_CLIENTS} names"),
            );
        }
        for (i, c) in self.stripe_clients.iter().enumerate() {
            if c.is_empty() || c.len() > MAX_IMPL_NAME {
                return bad(
                    &format!("stripe_clients[{i}]"),
                    format!("must be 1..={MAX_IMPL_NAME} bytes (an nii_name, RFC 8881 §18.35)"),
                );
            }
        }
        Ok(())
    }

    /// `layouts` for a gateway whose store is `backend`: RW layouts are striped only
    /// where the store writes in place (`fs` with `shared = true`). On s3 each data
    /// server stages the object and uploads it whole on COMMIT
    /// (`backend/s3/stage.rs`: read-modify-write over the base object), so two data
    /// servers committing different stripes of one file would each upload their own
    /// stripes over the other's: the last upload wins and the other stripes are lost.
    pub fn layouts_on(
        &self,
        backend: &super::BackendConfig,
    ) -> Option<crate::state::layouts::Devices> {
        let mut d = self.layouts()?;
        d.stripe.rw = backend.kind == super::BackendKind::Fs && backend.shared;
        Some(d)
    }

    /// What the NFSv4.1 state and operations use: `None` when off.
    pub fn layouts(&self) -> Option<crate::state::layouts::Devices> {
        if !self.enabled {
            return None;
        }
        let ds = self
            .data_servers
            .iter()
            .map(|d| {
                let addr = d.address.parse().expect("validated");
                let rdma = d.netid == DsNetid::Rdma;
                let probe = match &d.probe_address {
                    Some(p) => Some(p.parse().expect("validated")),
                    None => (!rdma).then_some(addr),
                };
                crate::state::layouts::DataServer { addr, rdma, probe }
            })
            .collect();
        Some(crate::state::layouts::Devices {
            servers: ds,
            stripe_unit: self.stripe_unit,
            rsize: self.rsize,
            wsize: self.wsize,
            read_mirrors: self.read_mirrors,
            stripe: crate::state::layouts::Stripe {
                width: self.stripe_width,
                clients: self.stripe_clients.clone(),
                rw: false,
            },
            probe: crate::state::layouts::Probe {
                every: std::time::Duration::from_millis(self.probe_ms),
                timeout: std::time::Duration::from_millis(self.probe_timeout_ms),
                failures: self.probe_failures,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const X: &str = "[[exports]]\npath = \"/\"\n";

    fn parse(pnfs: &str) -> Result<Config, String> {
        Config::parse(&format!("{pnfs}\n{X}")).map_err(|e| e.to_string())
    }

    #[test]
    fn off_by_default_and_no_devices() {
        let c = parse("").unwrap();
        assert!(!c.pnfs.enabled);
        assert!(c.pnfs.layouts().is_none());
    }

    #[test]
    fn on_with_data_servers_gives_devices() {
        let c = parse(
            "[pnfs]\nenabled = true\nread_mirrors = 2\n\
             [[pnfs.data_servers]]\naddress = \"10.0.0.2:2049\"\n\
             [[pnfs.data_servers]]\naddress = \"10.0.0.3:20049\"\nnetid = \"rdma\"\n",
        )
        .unwrap();
        let d = c.pnfs.layouts().unwrap();
        assert_eq!(d.servers.len(), 2);
        assert_eq!(d.servers[1].netid(), "rdma");
        assert_eq!(d.servers[0].uaddr(), "10.0.0.2.8.1");
        assert_eq!(
            (d.stripe_unit, d.rsize, d.wsize, d.read_mirrors),
            (1 << 20, 1 << 20, 1 << 20, 2)
        );
        assert_ne!(d.servers[0].device_id(), d.servers[1].device_id());
    }

    /// Each mistake names its key.
    #[test]
    fn errors_name_the_key() {
        let ds = "[[pnfs.data_servers]]\naddress = \"10.0.0.2:2049\"\n";
        for (text, key) in [
            ("[pnfs]\nenabled = true\n", "pnfs.data_servers"),
            (
                "[pnfs]\n[[pnfs.data_servers]]\naddress = \"ds1:2049\"\n",
                "pnfs.data_servers[0].address",
            ),
            (&format!("[pnfs]\n{ds}{ds}"), "pnfs.data_servers[1]"),
            (&format!("[pnfs]\nrsize = 1000\n{ds}"), "pnfs.rsize"),
            (&format!("[pnfs]\nwsize = 4194304\n{ds}"), "pnfs.wsize"),
            (
                &format!("[pnfs]\nstripe_unit = 0\n{ds}"),
                "pnfs.stripe_unit",
            ),
            (
                &format!("[pnfs]\nread_mirrors = 0\n{ds}"),
                "pnfs.read_mirrors",
            ),
            (
                &format!("[pnfs]\nprobe_failures = 0\n{ds}"),
                "pnfs.probe_failures",
            ),
            (
                &format!("[pnfs]\nprobe_timeout_ms = 0\n{ds}"),
                "pnfs.probe_timeout_ms",
            ),
            (
                "[pnfs]\n[[pnfs.data_servers]]\naddress = \"10.0.0.2:1\"\nprobe_address = \"x\"\n",
                "pnfs.data_servers[0].probe_address",
            ),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.starts_with(key), "{text}: {e}");
        }
        let e = parse("[pnfs]\n[[pnfs.data_servers]]\naddress = \"10.0.0.2:1\"\nnetid = \"udp\"\n")
            .unwrap_err();
        assert!(e.contains("netid") || e.contains("udp"), "{e}");
    }

    /// `stripe_width` (1 = off, at most the data servers listed and
    /// `MAX_STRIPE_WIDTH`), `stripe_clients` (bench's name by default; at most
    /// `MAX_STRIPE_CLIENTS`, each 1..=`MAX_IMPL_NAME` bytes), and a stripe unit that
    /// would not fit the arithmetic: each refused naming its key. RW stripes only on
    /// `fs` with `shared`.
    #[test]
    fn stripe_keys_are_checked() {
        let three = "[[pnfs.data_servers]]\naddress = \"10.0.0.2:2049\"\n\
                     [[pnfs.data_servers]]\naddress = \"10.0.0.3:2049\"\n\
                     [[pnfs.data_servers]]\naddress = \"10.0.0.4:2049\"\n";
        let c = parse(&format!("[pnfs]\nenabled = true\n{three}")).unwrap();
        let d = c.pnfs.layouts().unwrap();
        assert_eq!(d.stripe.width, 1);
        assert_eq!(d.stripe.clients, [nfs_wire::nfs4args::BENCH_IMPL_NAME]);
        assert!(!d
            .stripe
            .accepts(nfs_wire::nfs4args::BENCH_IMPL_NAME.as_bytes()));
        let c = parse(&format!(
            "[pnfs]\nenabled = true\nstripe_width = 3\nstripe_clients = [\"a\", \"b c\"]\n{three}"
        ))
        .unwrap();
        let d = c.pnfs.layouts().unwrap();
        assert_eq!((d.stripe.width, d.stripe.rw), (3, false));
        assert!(d.stripe.accepts(b"b c") && !d.stripe.accepts(b"b"));
        let long = "x".repeat(super::MAX_IMPL_NAME + 1);
        let many = format!(
            "[{}]",
            vec!["\"n\""; super::MAX_STRIPE_CLIENTS + 1].join(",")
        );
        for (text, key) in [
            (
                format!("[pnfs]\nstripe_width = 0\n{three}"),
                "pnfs.stripe_width",
            ),
            (
                format!("[pnfs]\nstripe_width = 4\n{three}"),
                "pnfs.stripe_width",
            ),
            (
                "[pnfs]\nstripe_width = 2\n[[pnfs.data_servers]]\naddress = \"10.0.0.2:1\"\n"
                    .to_string(),
                "pnfs.stripe_width",
            ),
            (
                format!("[pnfs]\nstripe_width = 17\n{three}"),
                "pnfs.stripe_width",
            ),
            (
                format!("[pnfs]\nstripe_clients = [\"\"]\n{three}"),
                "pnfs.stripe_clients[0]",
            ),
            (
                format!("[pnfs]\nstripe_clients = [\"a\", \"{long}\"]\n{three}"),
                "pnfs.stripe_clients[1]",
            ),
            (
                format!("[pnfs]\nstripe_clients = {many}\n{three}"),
                "pnfs.stripe_clients",
            ),
            // A unit past 1 GiB: 16 of them would pass 2^34, and near 2^32 a
            // stripe's offsets would wrap a u32 (a u64 never, with the bounds).
            (
                format!("[pnfs]\nstripe_unit = 4294963200\n{three}"),
                "pnfs.stripe_unit",
            ),
        ] {
            let e = parse(&text).expect_err(&text);
            assert!(e.starts_with(key), "{text}: {e}");
        }
        // Too large for the key's type at all: refused by the parser.
        assert!(parse(&format!(
            "[pnfs]\nstripe_unit = 18446744073709551615\n{three}"
        ))
        .is_err());
        // Width 3 of three listed, and the full width, are fine.
        let wide = (0..16)
            .map(|i| format!("[[pnfs.data_servers]]\naddress = \"10.0.1.{i}:2049\"\n"))
            .collect::<String>();
        assert!(parse(&format!("[pnfs]\nstripe_width = 16\n{wide}")).is_ok());
        // RW layouts are striped only where the store writes in place.
        let text = format!("[pnfs]\nenabled = true\nstripe_width = 3\n{three}");
        for (backend, rw) in [
            ("[backend]\nkind = \"fs\"\nshared = true\n", true),
            ("[backend]\nkind = \"fs\"\n", false),
            ("[backend]\nkind = \"memory\"\n", false),
        ] {
            let c = parse(&format!("{backend}{text}")).unwrap();
            assert_eq!(
                c.pnfs.layouts_on(&c.backend).unwrap().stripe.rw,
                rw,
                "{backend}"
            );
        }
    }

    /// A TCP data server is probed at its address, an RDMA one only where its
    /// `probe_address` names a TCP listener; the probe keys reach the devices.
    #[test]
    fn probe_addresses_and_keys() {
        let c = parse(
            "[pnfs]\nenabled = true\nprobe_ms = 250\nprobe_timeout_ms = 100\nprobe_failures = 2\n\
             [[pnfs.data_servers]]\naddress = \"10.0.0.2:2049\"\n\
             [[pnfs.data_servers]]\naddress = \"10.0.0.3:20049\"\nnetid = \"rdma\"\n\
             [[pnfs.data_servers]]\naddress = \"10.0.0.4:20049\"\nnetid = \"rdma\"\n\
             probe_address = \"10.0.0.4:2049\"\n",
        )
        .unwrap();
        let d = c.pnfs.layouts().unwrap();
        let probes: Vec<_> = d.servers.iter().map(|s| s.probe).collect();
        assert_eq!(
            probes,
            [
                Some("10.0.0.2:2049".parse().unwrap()),
                None,
                Some("10.0.0.4:2049".parse().unwrap())
            ]
        );
        let ms = std::time::Duration::from_millis;
        assert_eq!(
            (d.probe.every, d.probe.timeout, d.probe.failures),
            (ms(250), ms(100), 2)
        );
        let dflt =
            parse("[pnfs]\nenabled = true\n[[pnfs.data_servers]]\naddress = \"10.0.0.2:2049\"\n")
                .unwrap();
        let p = dflt.pnfs.layouts().unwrap().probe;
        assert_eq!((p.every, p.timeout, p.failures), (ms(1000), ms(500), 3));
    }

    /// `--print-config` shows the section and its output parses back the same.
    #[test]
    fn printed_and_read_back() {
        let c = parse("[pnfs]\nenabled = true\n[[pnfs.data_servers]]\naddress = \"[::1]:2049\"\n")
            .unwrap();
        let out = crate::effective::render(&c).unwrap();
        assert!(
            out.contains("[pnfs]") && out.contains("stripe_unit = 1048576"),
            "{out}"
        );
        let again = Config::parse(&out).unwrap();
        assert_eq!(again.pnfs.layouts(), c.pnfs.layouts());
        let d = again.pnfs.layouts().unwrap();
        assert_eq!(
            (d.servers[0].netid(), d.servers[0].uaddr()),
            ("tcp6", "::1.8.1".into())
        );
    }

    /// A reload names the change as needing a restart.
    #[test]
    fn reload_needs_a_restart() {
        let a = parse("").unwrap();
        let b =
            parse("[pnfs]\nenabled = true\n[[pnfs.data_servers]]\naddress = \"10.0.0.2:2049\"\n")
                .unwrap();
        let plan = crate::reload::plan(&a, &b).unwrap();
        assert!(
            plan.restart.iter().any(|k| k.starts_with("pnfs")),
            "{:?}",
            plan.restart
        );
    }
}
