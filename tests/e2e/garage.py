"""A real distributed S3 store for the tests: a three-node Garage cluster on loopback
(replication factor 3), driven through tools/garage/cluster.sh.

    g = GarageCluster(workdir).start()     # ~2 s once the binary is cached
    g.endpoints                            # the three S3 URLs (one per node)
    bucket = g.new_bucket("tag")           # `garage bucket create` + `bucket allow` (rw)
    s3 = g.client()                        # boto3, path-style, the cluster's key
    g.gateway_s3_config(bucket)            # the gateway's [backend.s3] table (a dict)
    g.kill(0); g.restart(0)                # SIGKILL node 0, start it again (waits healthy)
    g.stop_all_nodes(); g.cont_all_nodes() # SIGSTOP / SIGCONT every node
    g.stop()

Nodes are indexed 0..2 in the order of `endpoints`. The binary comes from
tools/garage/install.sh's cache (`garage_bin()`); nothing here builds it.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "tools" / "garage" / "cluster.sh"
VERSION = os.environ.get("GARAGE_VERSION", "2.5.0")


def garage_bin() -> Optional[Path]:
    """The cached garage binary, or None when tools/garage/install.sh has not run (or
    NFSGW_GARAGE=0 turns the Garage tests off)."""
    if os.environ.get("NFSGW_GARAGE") == "0":
        return None
    env = os.environ.get("GARAGE_BIN")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    cache = Path(os.environ.get("NFSGW_CACHE", Path.home() / ".cache" / "nfsgw"))
    p = cache / f"garage-{VERSION}" / "bin" / "garage"
    return p if os.access(p, os.X_OK) else None


SKIP_REASON = ("no Garage binary: run tools/garage/install.sh once (builds and caches it, "
               "~25 min) to run the [garage] tests; NFSGW_GARAGE=0 turns them off")


class GarageCluster:
    _seq = itertools.count(1)

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.env: dict = {}
        self.endpoints: list = []
        self.region = "garage"
        self.access_key = ""
        self.secret_key = ""

    # -- lifecycle -------------------------------------------------------------------
    def _sh(self, *args: str, timeout: float = 120.0) -> str:
        env = dict(os.environ)
        b = garage_bin()
        if b is not None:
            env["GARAGE_BIN"] = str(b)
        # a watchdog in cluster.sh stops the nodes if this process dies without teardown
        env["NFSGW_GARAGE_OWNER_PID"] = str(os.getpid())
        r = subprocess.run(["bash", str(CLUSTER_SH), args[0], str(self.workdir), *args[1:]],
                           capture_output=True, text=True, timeout=timeout, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"cluster.sh {' '.join(args)} failed ({r.returncode}):\n{r.stderr}{r.stdout}")
        return r.stdout

    def start(self) -> "GarageCluster":
        out = self._sh("start")
        for line in out.splitlines():
            m = re.match(r"export (\w+)=(.*)$", line)
            if m:
                self.env[m.group(1)] = shlex.split(m.group(2))[0]
        self.endpoints = self.env["GARAGE_S3_ENDPOINTS"].split()
        self.region = self.env["GARAGE_REGION"]
        self.access_key = self.env["GARAGE_ACCESS_KEY"]
        self.secret_key = self.env["GARAGE_SECRET_KEY"]
        return self

    def stop(self) -> None:
        self.cont_all_nodes()
        self._sh("stop")

    def kill(self, i: int) -> None:
        """SIGKILL node i (0-based, the node behind endpoints[i])."""
        self._sh("kill", str(i + 1))

    def restart(self, i: int, timeout: float = 60.0) -> None:
        """Start node i again and wait until the cluster is fully healthy."""
        self._sh("restart", str(i + 1), str(int(timeout)), timeout=timeout + 30)

    def heal(self, timeout: float = 60.0) -> None:
        """Every node resumed and running (after kills and pauses); waits for full health."""
        self._sh("heal", str(int(timeout)), timeout=timeout + 30)

    def pause(self, i: int) -> None:
        self._sh("pause", str(i + 1))

    def resume(self, i: int) -> None:
        self._sh("resume", str(i + 1))

    def stop_all_nodes(self) -> None:
        """SIGSTOP every node: the store stalls (connections open, nothing answers)."""
        self._sh("pause", "all")

    def cont_all_nodes(self) -> None:
        self._sh("resume", "all")

    def cli(self, *args: str) -> str:
        return self._sh("cli", *args)

    def node_log(self, i: int) -> Path:
        return self.workdir / f"node{i + 1}" / "garage.log"

    # -- buckets ---------------------------------------------------------------------
    def new_bucket(self, tag: str = "") -> str:
        n = next(self._seq)
        tag = "".join(ch for ch in tag.lower() if ch.isalnum())[:20]
        name = f"gw-{os.getpid()}-{n}-{tag + '-' if tag else ''}{uuid.uuid4().hex[:6]}"
        self.cli("bucket", "create", name)
        self.cli("bucket", "allow", "--read", "--write", "--owner", name, "--key", "nfsgw")
        self.wait_bucket(name)
        return name

    def wait_bucket(self, bucket: str, timeout: float = 20.0) -> None:
        """Until every node's S3 API knows `bucket`: a node that was just restarted can
        answer NoSuchBucket for a fresh bucket for a few seconds (its bucket tables catch
        up in the background)."""
        import time
        from botocore.exceptions import ClientError, EndpointConnectionError
        deadline = time.monotonic() + timeout
        for ep in self.endpoints:
            c = self.client(ep, max_attempts=1)
            while True:
                try:
                    c.head_bucket(Bucket=bucket)
                    break
                except EndpointConnectionError:
                    break       # a node that is down (a test killed it) is not waited for
                except ClientError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    def empty_bucket(self, bucket: str, delete: bool = True) -> None:
        """Best effort: every object and unfinished upload, then the bucket."""
        s3 = self.client(max_attempts=2)
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if objs:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": objs, "Quiet": True})
            for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
            if delete:
                s3.delete_bucket(Bucket=bucket)
        except Exception:
            pass

    def client(self, endpoint: Optional[str] = None, **kw):
        """boto3 S3 client (path-style, the cluster's key) to one node (default: the
        first live one is up to the caller; endpoints[0] when not given)."""
        import boto3
        from botocore.config import Config

        cfg = Config(s3={"addressing_style": "path"},
                     retries={"total_max_attempts": kw.pop("max_attempts", 3), "mode": "standard"},
                     connect_timeout=kw.pop("connect_timeout", 5), read_timeout=kw.pop("read_timeout", 60))
        return boto3.client("s3", endpoint_url=endpoint or self.endpoints[0], region_name=self.region,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                            config=cfg, **kw)

    def gateway_s3_config(self, bucket: str, endpoints: Optional[list] = None, **over) -> dict:
        """The gateway's `[backend.s3]` table: every node's endpoint (failover between
        them), short timeouts so faults show quickly in tests."""
        eps = list(endpoints or self.endpoints)
        cfg = {
            "region": self.region,
            "bucket": bucket,
            "path_style": True,
            "allow_http": True,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "timeout_s": 5,
            "retries": 3,
        }
        if multi_endpoint_supported():
            cfg["endpoints"] = eps
        else:
            # a gateway without `endpoints` (before the s3 failover work) gets the first
            cfg["endpoint"] = eps[0]
        cfg.update(over)
        return cfg


_MULTI: Optional[bool] = None


def multi_endpoint_supported() -> bool:
    """Whether the gateway under test accepts `backend.s3.endpoints` (probed once with
    `gateway --check-config`)."""
    global _MULTI
    if _MULTI is None:
        import tempfile
        gw = os.environ.get("GATEWAY_BIN") or str(REPO / "target" / "release" / "gateway")
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "probe.toml"
            p.write_text('[backend]\nkind = "s3"\n[backend.s3]\nbucket = "b"\nallow_http = true\n'
                         'path_style = true\nendpoints = ["http://127.0.0.1:1", "http://127.0.0.1:2"]\n'
                         f'[state]\ndir = "{d}"\n[[exports]]\npath = "/"\n')
            try:
                r = subprocess.run([gw, "--check-config", str(p)], capture_output=True, timeout=30)
                _MULTI = r.returncode == 0
            except OSError:     # no gateway binary: the gateway_bin fixture reports that
                _MULTI = False
    return _MULTI
