"""The Debian package (tools/package/build-deb.sh, cargo-deb; docs/operations.md): built
from this tree's release build, then inspected with dpkg-deb: the files, the conffile,
the maintainer scripts, manual pages that `man -l` renders, completions, a packaged
configuration that validates with the package's paths and a unit that verifies. The
package is installed, started, mounted, upgraded, removed and purged in the VM stage
`package` (tests/vm/guest-package.sh)."""

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import find_gateway_bin

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    """The .deb: $NFSGW_DEB if given, else built into the gateway binary's target dir."""
    if os.environ.get("NFSGW_DEB"):
        return Path(os.environ["NFSGW_DEB"])
    if not shutil.which("cargo-deb"):
        pytest.fail("cargo-deb missing: tests/setup.sh installs it (cargo install cargo-deb --locked)")
    target = find_gateway_bin().resolve().parent.parent
    # NO_BUILD=1: the binaries the other suites test, packaged as they are.
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), NO_BUILD="1")
    r = subprocess.run(["bash", str(REPO / "tools/package/build-deb.sh")], capture_output=True,
                       text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return Path(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tree(deb, tmp_path_factory) -> Path:
    """The package unpacked: files under tree/, control files under tree/DEBIAN/."""
    d = tmp_path_factory.mktemp("deb")
    subprocess.run(["dpkg-deb", "-R", str(deb), str(d)], check=True)
    return d


def dpkg_deb(*args) -> str:
    return subprocess.run(["dpkg-deb", *args], capture_output=True, text=True, check=True).stdout


def test_files(deb):
    listing = dpkg_deb("-c", str(deb))
    files = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    want = ["/usr/bin/nfsgw", "/usr/bin/nfsgw-tools", "/usr/bin/nfsgw-bench",
            "/etc/nfsgw/nfsgw.toml", "/usr/lib/systemd/system/nfsgw.service",
            "/usr/share/man/man1/nfsgw.1.gz", "/usr/share/man/man1/nfsgw-tools.1.gz",
            "/usr/share/man/man1/nfsgw-tools-top.1.gz", "/usr/share/man/man1/nfsgw-tools-man.1.gz",
            "/usr/share/bash-completion/completions/nfsgw-tools",
            "/usr/share/zsh/vendor-completions/_nfsgw-tools",
            "/usr/share/fish/vendor_completions.d/nfsgw-tools.fish",
            "/usr/share/doc/nfsgw/operations.md", "/usr/share/doc/nfsgw/copyright",
            "/usr/share/nfsgw/grafana/overview.json"]
    missing = [f for f in want if f not in files]
    assert not missing, f"missing {missing} in:\n{listing}"
    # Nothing outside the places a package may own; state and data are made by postinst.
    assert not [f for f in files if f.startswith(("/var", "/usr/local", "/home"))], listing


def test_control(deb):
    info = dpkg_deb("-I", str(deb))
    assert "Package: nfsgw" in info
    depends = next(l for l in info.splitlines() if l.strip().startswith("Depends:"))
    assert "adduser" in depends and "libc6" in depends, depends
    for script in ("postinst", "postrm", "prerm", "conffiles"):
        assert script in info, f"{script} missing:\n{info}"


def test_conffile_and_config(tree):
    assert (tree / "DEBIAN/conffiles").read_text().split() == ["/etc/nfsgw/nfsgw.toml"]
    conf = tree / "etc/nfsgw/nfsgw.toml"
    text = conf.read_text()
    assert 'root = "/var/lib/nfsgw/data"' in text and 'dir = "/var/lib/nfsgw/state"' in text
    # The rest is the embedded default (configs/default.toml): same keys and values.
    body = [l for l in text.splitlines() if l and not l.startswith("#")]
    default = [l for l in (REPO / "configs/default.toml").read_text().splitlines()
               if l and not l.startswith("#")]
    differ = [(a, b) for a, b in zip(body, default) if a != b]
    assert len(body) == len(default) and len(differ) == 2, differ
    r = subprocess.run([str(tree / "usr/bin/nfsgw"), "--check-config", str(conf)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_maintainer_scripts(tree):
    postinst = (tree / "DEBIAN/postinst").read_text()
    assert "adduser --system" in postinst and "/var/lib/nfsgw/data" in postinst
    # cargo-deb's systemd snippets replaced #DEBHELPER#: the unit is registered but not
    # enabled or started on install (the operator runs `systemctl enable --now nfsgw`),
    # and restarted on upgrade if it runs (try-restart).
    assert "#DEBHELPER#" not in postinst
    assert "deb-systemd-helper" in postinst and "deb-systemd-invoke try-restart" in postinst
    assert "deb-systemd-helper enable" in postinst  # only `if was-enabled` (upgrade)
    assert "was-enabled" in postinst
    postrm = (tree / "DEBIAN/postrm").read_text()
    assert "rm -rf /etc/nfsgw" in postrm and "NFSGW_PURGE_STATE" in postrm
    assert "/var/lib/nfsgw/data" not in postrm.split("set -e", 1)[1].replace("and /var/lib/nfsgw/data", ""), \
        "postrm must never delete the data directory"
    for s in ("postinst", "postrm", "prerm"):
        r = subprocess.run(["sh", "-n", str(tree / "DEBIAN" / s)], capture_output=True, text=True)
        assert r.returncode == 0, (s, r.stderr)


def test_man_pages_render(tree):
    man = shutil.which("man")
    assert man, "man-db missing"
    for page, must in [("nfsgw.1.gz", "--check-config"), ("nfsgw-tools.1.gz", "completions"),
                       ("nfsgw-tools-top.1.gz", "--url")]:
        r = subprocess.run([man, "-l", str(tree / "usr/share/man/man1" / page)],
                           capture_output=True, text=True, env=dict(os.environ, MANPAGER="cat",
                                                                   MANWIDTH="100", LANG="C.UTF-8"))
        assert r.returncode == 0, (page, r.stderr)
        flat = r.stdout.replace("\u2010", "-").replace("\u2212", "-")
        assert must in flat, (page, flat[:1500])
        assert "NAME" in flat and "SYNOPSIS" in flat, page


def test_completions(tree):
    bash = (tree / "usr/share/bash-completion/completions/nfsgw-tools").read_text()
    assert "complete" in bash and "sweep" in bash and "top" in bash
    r = subprocess.run(["bash", "-n", str(tree / "usr/share/bash-completion/completions/nfsgw-tools")])
    assert r.returncode == 0


def test_unit_verifies_and_matches_the_manual_one(tree, tmp_path):
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze missing: tests/setup.sh installs systemd"
    text = (tree / "usr/lib/systemd/system/nfsgw.service").read_text()
    unit = tmp_path / "nfsgw.service"
    unit.write_text(text.replace("/usr/bin/nfsgw", str(tree / "usr/bin/nfsgw")))
    # --man=no: Documentation=man:nfsgw(1) exists once the package is installed, not here.
    r = subprocess.run([exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    noise = [l for l in (r.stdout + r.stderr).splitlines() if "nfsgw.service" in l]
    assert r.returncode == 0 and not noise, r.stdout + r.stderr

    def keys(t):
        return {l.split("=", 1)[0]: l.split("=", 1)[1] for l in t.splitlines()
                if "=" in l and not l.startswith("#")}
    pkg, manual = keys(text), keys((REPO / "configs/nfsgw.service").read_text())
    # Supervision, limits and reload are the manual unit's; only paths, user and
    # hardening differ (docs/operations.md).
    for k in ("Type", "NotifyAccess", "Restart", "RestartSec", "WatchdogSec", "KillSignal",
              "TimeoutStopSec", "LimitNOFILE", "LimitMEMLOCK", "ExecReload", "StartLimitBurst",
              "StartLimitIntervalSec", "EnvironmentFile", "WantedBy"):
        assert pkg.get(k) == manual.get(k), (k, pkg.get(k), manual.get(k))
    assert pkg["User"] == "nfsgw" and "CAP_NET_BIND_SERVICE" in pkg["AmbientCapabilities"]
    assert pkg["ExecStart"] == "/usr/bin/nfsgw --config /etc/nfsgw/nfsgw.toml"
