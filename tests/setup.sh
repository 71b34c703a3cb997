#!/usr/bin/env bash
# Idempotent installer for the end-to-end test harness (Debian 12, run as root).
#
#   tests/setup.sh
#
# Installs libnfs-utils (nfs-ls, nfs-cp, nfs-cat: a real third-party NFS client),
# creates the Python venv tests/.venv (a link into ~/.cache/nfsgw) with pytest and
# pytest-xdist, and tries to build the PyPI `libnfs` Python bindings (needs libnfs-dev,
# swig, python3-dev). When that build fails the harness still works: the suites use our own client tests/e2e/nfsclient.py.
# Installs cargo-deb (the Debian package) and Debian's prometheus (the dashboards' test).
# Installs moto[server] (a real S3-compatible server, plus boto3) for the s3 backend tests.
# A second run with everything in place is a fast no-op.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
PY=/usr/bin/python3            # the system interpreter (matches python3-dev headers)

log() { echo "setup.sh: $*" >&2; }

# ---- Debian packages --------------------------------------------------------
PKGS=(libnfs-utils libnfs-dev swig python3-dev python3-venv build-essential pkg-config
      libibverbs-dev librdmacm-dev libclang-dev fio systemd libfuse3-3 prometheus man-db keepalived iproute2
      xfsprogs attr perl curl tcpdump etcd-server)
missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then
        log "need root to apt-get install ${missing[*]}"; exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # the bindings' build deps are best effort; the utilities are required
    apt-get install -y -qq --no-install-recommends libnfs-utils python3-venv
    apt-get install -y -qq --no-install-recommends libnfs-dev swig python3-dev build-essential pkg-config \
        || log "WARNING: could not install build deps for the libnfs Python bindings"
    # the `rdma` cargo feature (verbs provider; bindgen) and fio: run-all.sh lints the
    # feature build and runs fio in the NFS/RDMA VM stage, so they are required
    apt-get install -y -qq --no-install-recommends libibverbs-dev librdmacm-dev libclang-dev fio
    # systemd-analyze: tests/e2e/test_service.py verifies configs/nfsgw.service
    apt-get install -y -qq --no-install-recommends systemd
    # libfuse 3 for tests/e2e/faultfs.py (EIO injected under the gateway's fs backend)
    apt-get install -y -qq --no-install-recommends libfuse3-3
    # a real Prometheus for tests/e2e/test_dashboards.py (the Grafana dashboards' queries)
    apt-get install -y -qq --no-install-recommends prometheus
    # man -l renders the package's generated manual pages (tests/e2e/test_package.py)
    apt-get install -y -qq --no-install-recommends man-db
    # keepalived moves the service address between network namespaces in
    # gateway/tests/ha_netns.rs, on the reference configuration of tools/ha/
    apt-get install -y -qq --no-install-recommends keepalived iproute2
    # etcd (3.4): the coordination service of `[ha] etcd` (gateway/tests/ha_etcd.rs and
    # the ha::etcd unit tests start their own on loopback); Debian's service is not
    # wanted (on a host booted with systemd the package starts one on port 2379)
    apt-get install -y -qq --no-install-recommends etcd-server
    systemctl disable --now etcd >/dev/null 2>&1 || true
    # xfs_io, setfattr: the VM guest's SEEK_HOLE/SEEK_DATA and xattr checks (tests/vm/kernel-nfs4*.sh; the
    # guest runs on this machine's root file system)
    apt-get install -y -qq --no-install-recommends xfsprogs attr
    # perl with Time::HiRes (not in perl-base): tests/vm/ha-lock.pl, the VM stage ha's lock tool
    apt-get install -y -qq --no-install-recommends perl
    # tcpdump: the VM stage ha's SYN trace over several takeovers (HA_ROUNDS > 1,
    # tests/vm/guest-ha.sh; the guest runs the host's binaries)
    apt-get install -y -qq --no-install-recommends tcpdump
fi
for b in nfs-ls nfs-cp nfs-cat; do
    command -v "$b" >/dev/null || { log "missing $b after install"; exit 1; }
done

# ---- cargo-deb: builds the Debian package (tools/package/build-deb.sh) ----------------
# tests/e2e/test_package.py and the VM stage "package" need it. --locked: the versions
# its own release was tested with.
if ! command -v cargo-deb >/dev/null; then
    log "installing cargo-deb"
    cargo install cargo-deb --locked
fi

# ---- venv with pytest ---------------------------------------------------------
# A fresh checkout links tests/.venv to a venv in the machine's cache
# (${NFSGW_CACHE:-~/.cache/nfsgw}/venv, beside the cargo target dir of tests/run-all.sh):
# a clean clone (CI) then reuses the pip downloads and the libnfs bindings' build.
# An existing tests/.venv (a directory or a link) is kept as it is.
if [[ ! -e "$VENV" && ! -L "$VENV" ]]; then
    CACHE=${NFSGW_CACHE:-$HOME/.cache/nfsgw}
    mkdir -p "$CACHE"
    ln -s "$CACHE/venv" "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV"
    # at its real path: the scripts' #! lines must not name a checkout that may go away
    "$PY" -m venv "$(readlink -f "$VENV")"
fi
# keep the venv out of git without touching files outside tests/
[[ -f "$VENV/.gitignore" ]] || echo '*' > "$VENV/.gitignore"

if ! "$VENV/bin/python" -c 'import pytest, pytest_timeout' 2>/dev/null; then
    log "installing pytest, pytest-timeout"
    "$VENV/bin/pip" install -q --disable-pip-version-check pytest pytest-timeout
fi
# pytest-xdist: tests/run-e2e.sh runs the suites on several workers (most e2e time is
# waiting on timers and servers, not CPU). Pinned: the scheduling the suite was tuned on.
XDIST=3.8.0
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('pytest-xdist') != '$XDIST')" 2>/dev/null; then
    log "installing pytest-xdist==$XDIST"
    "$VENV/bin/pip" install -q --disable-pip-version-check "pytest-xdist==$XDIST"
fi

# ---- S3-compatible server for the s3 backend's tests ------------------------------
# moto's server mode (PyPI `moto[server]`, brings boto3): a real S3 HTTP endpoint the
# harness starts on loopback (tests/e2e/s3server.py). Version pinned below a major so a
# fresh machine gets the same behaviour the suite was written against.
if ! "$VENV/bin/python" -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ("moto", "boto3", "flask", "flask_cors")))' 2>/dev/null \
    || [[ ! -x "$VENV/bin/moto_server" ]]; then
    log "installing moto[server] (S3-compatible server for the s3 backend tests)"
    "$VENV/bin/pip" install -q --disable-pip-version-check 'moto[server]>=5,<6'
fi

# ---- FUSE bindings for the EIO file system of test_uring_fault.py -------------------
# mfusepy: ctypes bindings to libfuse 3 (no build step); tests/e2e/faultfs.py.
if ! "$VENV/bin/python" -c 'import mfusepy' 2>/dev/null; then
    log "installing mfusepy (FUSE bindings for tests/e2e/faultfs.py)"
    "$VENV/bin/pip" install -q --disable-pip-version-check 'mfusepy>=3.1,<4'
fi

# ---- optional: PyPI libnfs bindings ------------------------------------------------
# Attempted once; the outcome is remembered in $VENV/.libnfs-bindings (ok|failed).
MARK="$VENV/.libnfs-bindings"
if "$VENV/bin/python" -c 'import libnfs' 2>/dev/null; then
    echo ok > "$MARK"
elif [[ ! -f "$MARK" ]]; then
    log "trying to build the PyPI libnfs Python bindings (optional)"
    if "$VENV/bin/pip" install -q --disable-pip-version-check libnfs >"$VENV/.libnfs-build.log" 2>&1 \
        && "$VENV/bin/python" -c 'import libnfs' 2>>"$VENV/.libnfs-build.log"; then
        echo ok > "$MARK"
        log "libnfs Python bindings: built"
    else
        echo failed > "$MARK"
        log "NOTE: libnfs Python bindings could not be built (see $VENV/.libnfs-build.log);"
        log "      the suites rely on our own client tests/e2e/nfsclient.py instead"
    fi
fi
exit 0
