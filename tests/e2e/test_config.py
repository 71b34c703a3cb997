"""`gateway --check-config`, start-up and clean shutdown."""

import signal
import subprocess
from pathlib import Path

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


def run(binary, *args):
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=30)


def test_check_config_names_the_key(gateway_bin, tmp_path):
    g = Gateway(gateway_bin, tmp_path, backend="fs")
    good = g.config_text()
    for text, key in [
        (good.replace("[tcp]", "[tcp]\nmax_inflight = 0"), "tcp.max_inflight"),
        (good.replace('"127.0.0.0/8"', '"127.0.0.0/99"'), "exports[0].clients"),
        (good + '\n[stats]\nlisten = "0.0.0.0:9108"\n', "stats.listen"),
    ]:
        p = tmp_path / "bad.toml"
        p.write_text(text)
        r = run(gateway_bin, "--check-config", p)
        assert r.returncode != 0 and key in r.stderr, (key, r.returncode, r.stderr)
        assert not r.stdout, "nothing printed as valid"
        r = run(gateway_bin, "--print-config", p)
        assert r.returncode != 0 and key in r.stderr and not r.stdout


def test_print_config_round_trips_and_redacts(gateway_bin, tmp_path):
    g = Gateway(gateway_bin, tmp_path, backend="s3", s3={
        "endpoint": "http://127.0.0.1:9", "allow_http": True, "bucket": "b",
        "access_key_id": "AKIDPRINTED", "secret_access_key": "s3cr3t-never-printed",
        "session_token": "t0ken-never-printed"})
    r = run(gateway_bin, "--print-config", g.config_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "s3cr3t-never-printed" not in out and "t0ken-never-printed" not in out
    assert out.count('"<redacted>"') == 2, out
    assert "AKIDPRINTED" in out
    # Defaults filled in: keys the file never set, and the export's handle id.
    for line in ["max_connections = 1024", "lease_time_s = 60", "size_mib = 256", "id = 0",
                 'hugepages = "auto"', "timeout_s = "]:
        assert line in out, (line, out)
    printed = tmp_path / "printed.toml"
    printed.write_text(out)
    r = run(gateway_bin, "--check-config", printed)
    assert r.returncode == 0, (r.stderr, out)
    # A fixed point: printing the printed file gives the same text.
    assert run(gateway_bin, "--print-config", printed).stdout == out


def test_print_config_of_the_shipped_default(gateway_bin):
    repo = Path(__file__).resolve().parents[2]
    r = run(gateway_bin, "--print-config", repo / "configs" / "default.toml")
    assert r.returncode == 0, r.stderr
    assert 'provider = "soft"' in r.stdout and 'path = "/data"' in r.stdout


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
