#!/usr/bin/env bash
# build-fio-libnfs.sh - build fio with the libnfs "nfs" ioengine into /opt/fio-nfs.
#
# Debian 12 ships fio without libnfs support, so this rebuilds Debian's own fio
# source package with --enable-libnfs. Idempotent: does nothing if
# $PREFIX/bin/fio already knows --ioengine=nfs.
#
# Source tweak: libnfs can block in nfs_umount() when fio tears the job down.
# UMNT is advisory in NFSv3, so the call is made opt-in (FIO_NFS_UMOUNT=1).
#
# Env: PREFIX (default /opt/fio-nfs), SRC (default /var/tmp/fio-nfs-src), JOBS (make -j).
# Needs root (apt-get, writing /opt).
set -euo pipefail
PREFIX=${PREFIX:-/opt/fio-nfs}
SRC=${SRC:-/var/tmp/fio-nfs-src}
JOBS=${JOBS:-$(nproc)}
log() { echo "[build-fio-libnfs] $*" >&2; }

has_nfs_engine() { [ -x "$PREFIX/bin/fio" ] && "$PREFIX/bin/fio" --enghelp=nfs >/dev/null 2>&1; }

if has_nfs_engine; then
  log "$PREFIX/bin/fio already has the nfs ioengine ($("$PREFIX/bin/fio" --version)); nothing to do"
  exit 0
fi
[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }

# 1. deb-src entry for bookworm main (added once, in its own file)
if ! grep -rqsE '^(deb-src[[:space:]].*bookworm|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  log "adding deb-src for bookworm main: /etc/apt/sources.list.d/perf-deb-src.sources"
  cat > /etc/apt/sources.list.d/perf-deb-src.sources <<'SRCS'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRCS
  NEED_UPDATE=1
fi

# 2. build dependencies
need=""
for p in libnfs-dev dpkg-dev build-essential pkg-config zlib1g-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
done
if [ -n "$need" ] || [ -n "${NEED_UPDATE:-}" ] || ! apt-cache showsrc fio >/dev/null 2>&1 || [ -z "$(apt-cache showsrc fio 2>/dev/null)" ]; then
  log "apt-get update"
  apt-get update -qq || log "apt-get update reported errors (continuing)"
fi
if [ -n "$need" ]; then
  log "installing:$need"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi

# 3. Debian's fio source package
mkdir -p "$SRC"
cd "$SRC"
dir=$(find . -maxdepth 1 -type d -name 'fio-*' | sort | tail -1)
if [ -z "$dir" ]; then
  log "apt-get source fio (into $SRC)"
  apt-get source -qq fio
  dir=$(find . -maxdepth 1 -type d -name 'fio-*' | sort | tail -1)
fi
[ -n "$dir" ] || { log "no fio source tree in $SRC"; exit 1; }
cd "$dir"
log "source tree: $SRC/${dir#./}"

# 4. umount opt-in tweak (idempotent: only matches the untouched line)
if grep -q 'getenv("FIO_NFS_UMOUNT")' engines/nfs.c; then
  log "umount tweak already applied"
else
  sed -i 's/^\tnfs_umount(o->context);/\tif (getenv("FIO_NFS_UMOUNT")) nfs_umount(o->context);/' engines/nfs.c
  grep -q 'getenv("FIO_NFS_UMOUNT")' engines/nfs.c || { log "umount tweak did not apply (engines/nfs.c changed?)"; exit 1; }
  grep -q '^#include <stdlib.h>' engines/nfs.c || sed -i '0,/^#include/s//#include <stdlib.h>\n#include/' engines/nfs.c
  log "umount tweak applied"
fi

# 5. build + install
./configure --disable-native --enable-libnfs --prefix="$PREFIX" >configure.log 2>&1 || { tail -20 configure.log; exit 1; }
grep -qi 'NFS engine.*yes' configure.log || { log "configure did not enable libnfs:"; grep -i nfs configure.log >&2; exit 1; }
make -j"$JOBS" >make.log 2>&1 || { tail -30 make.log; exit 1; }
make install >install.log 2>&1 || { tail -30 install.log; exit 1; }

has_nfs_engine || { log "built, but $PREFIX/bin/fio has no nfs ioengine"; exit 1; }
log "done: $("$PREFIX/bin/fio" --version) with nfs ioengine at $PREFIX/bin/fio"
