"""`gateway --check-config`, start-up and clean shutdown."""

import signal
import subprocess

import nfsclient as N
from conftest import Gateway


def check(binary, path):
    return subprocess.run([str(binary), "--check-config", str(path)], capture_output=True, timeout=30)


def test_check_config_valid(gateway_bin, tmp_path):
    g = Gateway(gateway_bin, tmp_path, backend="fs")
    p = check(gateway_bin, g.config_path)
    assert p.returncode == 0, f"valid config rejected: {p.stderr.decode(errors='replace')}\n{g.config_text()}"
    g2 = Gateway(gateway_bin, tmp_path / "m", backend="memory")
    assert check(gateway_bin, g2.config_path).returncode == 0


def test_check_config_invalid(gateway_bin, tmp_path):
    g = Gateway(gateway_bin, tmp_path, backend="fs")
    good = g.config_text()
    bad = {
        "unknown key": good.replace("[tcp]", "[tcp]\nbogus_key = 1"),
        "bad backend": good.replace('kind = "fs"', 'kind = "s3-ish"'),
        "bad access": good.replace('access = "rw"', 'access = "maybe"'),
        "bad cidr": good.replace('"127.0.0.0/8"', '"127.0.0.0/99"'),
        "bad listen": good.replace(f'"127.0.0.1:{g.port}"', '"not an address"'),
        "not toml": "[[[",
    }
    for name, text in bad.items():
        p = tmp_path / "bad.toml"
        p.write_text(text)
        r = check(gateway_bin, p)
        assert r.returncode != 0, f"--check-config accepted a config with {name}"
        assert r.stderr, f"--check-config gave no message for {name}"
    r = check(gateway_bin, tmp_path / "does-not-exist.toml")
    assert r.returncode != 0


def test_sigint_clean_shutdown(gw_factory):
    g = gw_factory(backend="memory")
    with g.client() as c:
        assert c.null().accept_stat == N.SUCCESS
    g.stop(signal.SIGINT)


def test_many_clients_concurrently(gw):
    with gw.client() as admin:  # uid 0, as an operator would open up the export root
        admin.setattr(admin.mount("/"), mode=0o1777).check()
    clients = [gw.client(uid=1000 + i, gid=1000) for i in range(20)]
    root = clients[0].mount("/")
    for i, c in enumerate(clients):
        c.create(root, f"c{i}", 0o644).check()
    for i, c in enumerate(clients):
        fh = c.lookup(root, f"c{i}").check().fh
        assert c.getattr(fh).check().attr.uid == 1000 + i
        c.close()


def test_second_gateway_on_same_port_refused(gw_factory, gateway_bin, tmp_path):
    """Reactors share the port with SO_REUSEPORT; a second gateway must not silently
    join them: it exits non-zero naming tcp.listen, and the first keeps serving."""
    first = gw_factory(backend="memory")
    cfg = tmp_path / "second.toml"
    cfg.write_text(first.config_text().replace(str(first.state_dir), str(tmp_path / "state2")))
    r = subprocess.run([str(gateway_bin), "--config", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "tcp.listen" in r.stderr and "in use" in r.stderr, r.stderr
    with first.client() as c:
        assert c.getattr(c.mount("/")).ok
