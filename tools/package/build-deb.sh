#!/usr/bin/env bash
# Builds the Debian package nfsgw into $CARGO_TARGET_DIR/debian (target/debian/ by
# default) from the release build, with cargo-deb (`cargo install cargo-deb --locked`;
# tests/setup.sh installs it). docs/operations.md "Install" says what it installs.
#
#   tools/package/build-deb.sh            # prints the path of the .deb on stdout
#   DEB_REVISION=2 tools/package/build-deb.sh   # the same build as Debian revision 2
#                                               # (tests/vm/guest-package.sh upgrades to it)
#   NO_BUILD=1 tools/package/build-deb.sh       # package the binaries already in
#                                               # $CARGO_TARGET_DIR/release as they are
#
# Steps: build the three binaries; render what the package ships that is not a build
# product into target/release/nfsgw-pkg/ (cargo-deb's assets in gateway/Cargo.toml):
# the manual pages and completions from the clap definitions (`nfsgw-tools man`,
# `nfsgw-tools completions`) and /etc/nfsgw/nfsgw.toml from configs/default.toml with
# the package's paths; then `cargo deb --no-build`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
REL="$TARGET/release"
PKG="$REL/nfsgw-pkg"
log() { echo "build-deb.sh: $*" >&2; }

command -v cargo-deb >/dev/null || { log "cargo-deb missing: cargo install cargo-deb --locked"; exit 1; }

if [[ "${NO_BUILD:-0}" = 1 ]]; then
    # The binaries of a build made already (tests/run-all.sh's, whose feature set a
    # narrower `cargo build` would not reuse): package them as they are.
    for b in gateway nfsgw-tools bench; do
        [[ -x "$REL/$b" ]] || { log "NO_BUILD=1 but $REL/$b is missing"; exit 1; }
    done
else
    log "cargo build --release (gateway, nfsgw-tools, bench)"
    cargo build --release --locked -p gateway -p tools -p bench >&2
fi

rm -rf "$PKG"
mkdir -p "$PKG/man" "$PKG/completions"
"$REL/nfsgw-tools" man "$PKG/man" >&2
# Debian ships manual pages compressed (policy §12.1); -n: no timestamp in the file.
gzip -9n "$PKG"/man/*.1
for sh in bash zsh fish; do
    "$REL/nfsgw-tools" completions "$sh" --out "$PKG/completions" 2>/dev/null
done

# The packaged defaults are the embedded ones (configs/default.toml) with the
# package's directories: the service runs in /var/lib/nfsgw as the user nfsgw.
{
    cat <<'HDR'
# /etc/nfsgw/nfsgw.toml: the configuration of the nfsgw package (a conffile: kept on
# upgrade and remove, deleted on purge). Serves the directory /var/lib/nfsgw/data as the
# export /data to loopback clients: NFSv3, MOUNT and NFSv4.1 on 127.0.0.1:2049, and
# RPC-over-RDMA (soft provider) on 127.0.0.1:20049. Every key is described in
# /usr/share/doc/nfsgw/README.md ("Configuration reference"); docs/operations.md says
# how to change it (`systemctl reload nfsgw` applies exports, [stats] and log.level).
HDR
    sed -n '/^$/,$p' configs/default.toml \
        | sed -e 's|^root = "./data"|root = "/var/lib/nfsgw/data"|' \
              -e 's|^dir = "./state"|dir = "/var/lib/nfsgw/state"|'
} > "$PKG/nfsgw.toml"
grep -q '^root = "/var/lib/nfsgw/data"' "$PKG/nfsgw.toml" && grep -q '^dir = "/var/lib/nfsgw/state"' "$PKG/nfsgw.toml" \
    || { log "configs/default.toml changed shape: backend.root/state.dir not rewritten"; exit 1; }
"$REL/gateway" --check-config "$PKG/nfsgw.toml" >&2

log "cargo deb"
REV=${DEB_REVISION:-1}
# --strip: the release profile keeps line tables (debug = 1) for backtraces in
# development; the package ships the binaries stripped (5 MB instead of 35 MB).
# cargo-deb deletes the other nfsgw_*.deb of target/debian/ whatever --output says: copy
# a revision elsewhere before building the next (tests/vm/run-vm-stages.sh does).
cargo deb -p gateway --no-build --locked --strip --deb-revision "$REV" --output "$TARGET/debian/" >&2
ls "$TARGET"/debian/nfsgw_*-"$REV"_*.deb
