"""A real S3-compatible server on loopback for the `s3` backend's tests.

`moto`'s server mode (PyPI `moto[server]`, installed into tests/.venv by tests/setup.sh)
is started ONCE per test session on 127.0.0.1:<free port> (`S3Server`); each test gets
its own bucket with a unique name (`S3Server.new_bucket()`), so tests never see each
other's objects and the server start-up (about a second) is paid once.

    srv = S3Server(workdir).start()
    bucket = srv.new_bucket()              # "nfsgw-<pid>-<n>-<rand>"
    s3 = srv.client()                      # boto3 S3 client, path-style, fixed test keys
    s3.put_object(Bucket=bucket, Key="a/b", Body=b"x")
    srv.gateway_s3_config(bucket)          # the gateway's [backend.s3] table (a dict)
    srv.stop()

Nothing here needs the gateway; the conftest fixtures (`s3_server`, `s3_bucket`, `s3`)
build on it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Optional

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (even by SIGKILL),
    so no server outlives an aborted session."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def moto_server_bin() -> str:
    """The `moto_server` console script of the interpreter running the tests (the venv)."""
    cand = Path(sys.executable).parent / "moto_server"
    if cand.is_file():
        return str(cand)
    found = shutil.which("moto_server")
    if found:
        return found
    raise FileNotFoundError("moto_server not found: run tests/setup.sh (installs moto[server] into tests/.venv)")


def client(endpoint: str, **kw):
    """A boto3 S3 client for an S3-compatible endpoint: path-style, test credentials,
    a few retries only (fault tests want to see failures, not hide them)."""
    import boto3
    from botocore.config import Config

    # max_attempts: attempts in all (1 = no retry)
    cfg = Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": kw.pop("max_attempts", 3),
                                                           "mode": "standard"},
                 connect_timeout=kw.pop("connect_timeout", 5), read_timeout=kw.pop("read_timeout", 60))
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, config=cfg, **kw)


class S3Server:
    """moto_server on 127.0.0.1; `endpoint` is its URL."""

    _seq = itertools.count(1)

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.endpoint = f"http://{self.host}:{self.port}"
        self.log_path = self.workdir / "moto.log"
        self.proc: Optional[subprocess.Popen] = None
        self._client = None

    def start(self, timeout: float = 30.0) -> "S3Server":
        env = dict(os.environ)
        # moto must not pick up real credentials or a real endpoint from the environment
        for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            env.pop(k, None)
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION)
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([moto_server_bin(), "-H", self.host, "-p", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, preexec_fn=_die_with_parent)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
                self.client().list_buckets()
                return self
            except Exception:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server not answering on {self.endpoint} within {timeout}s; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    # -- S3 helpers ------------------------------------------------------------------
    def client(self, **kw):
        if not kw:
            if self._client is None:
                self._client = client(self.endpoint)
            return self._client
        return client(self.endpoint, **kw)

    def new_bucket(self, tag: str = "") -> str:
        """Creates a bucket with a fresh, valid, unique name and returns the name."""
        n = next(self._seq)
        tag = "".join(ch for ch in tag.lower() if ch.isalnum())[:20]
        name = f"nfsgw-{os.getpid()}-{n}-{tag + '-' if tag else ''}{uuid.uuid4().hex[:6]}"
        self.client().create_bucket(Bucket=name)
        return name

    def empty_bucket(self, bucket: str, delete: bool = True) -> None:
        """Deletes every object (and in-progress multipart upload), then the bucket: frees
        moto's memory between tests. Best effort."""
        s3 = self.client()
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if objs:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": objs, "Quiet": True})
            ups = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            for u in ups:
                s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
            if delete:
                s3.delete_bucket(Bucket=bucket)
        except Exception:
            pass

    def gateway_s3_config(self, bucket: str, endpoint: Optional[str] = None, **over) -> dict:
        """The `[backend.s3]` table for a gateway serving `bucket` (through `endpoint`,
        e.g. a fault proxy, when given)."""
        cfg = {
            "endpoint": endpoint or self.endpoint,
            "region": REGION,
            "bucket": bucket,
            "path_style": True,
            "allow_http": True,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "timeout_s": 10,
            "retries": 3,
        }
        cfg.update(over)
        return cfg


# ---------------------------------------------------------------------------- object helpers


# The gateway's own objects (its handle key, temporaries) start with this name and are
# never listed over NFS.
INTERNAL = ".nfsgw-tmp."


def list_keys(s3, bucket: str, prefix: str = "", internal: bool = False) -> list:
    """Keys under prefix; without `internal`, the gateway's own objects are left out."""
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    if not internal:
        # as the gateway judges them: any path component (".nfsgw-tmp.ids/<hex>",
        # ".nfsgw-tmp.handle-keys/<candidate>")
        out = [k for k in out if not any(p.startswith(INTERNAL) for p in k.split("/"))]
    return out


def get_bytes(s3, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def head(s3, bucket: str, key: str) -> Optional[dict]:
    """HeadObject, or None when the key does not exist."""
    from botocore.exceptions import ClientError

    try:
        return s3.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
            return None
        raise
