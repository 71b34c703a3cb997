#!/bin/bash
# PID 1 of a guest booted with VM_INIT=systemd (tools/vm/vm.sh; kernel argument
# vm.systemd=1): instead of running the script itself, as guest-init.sh does, it hands
# PID 1 to the host's systemd (the root is the host's, over 9p), which runs the script
# as a service. For what only a real service manager shows: `systemctl enable --now`,
# Type=notify, the package's maintainer scripts starting and stopping the unit,
# ProtectSystem=/PrivateTmp= namespaces (tests/vm/guest-package.sh).
#
# The units go into the overlay's tmpfs layer (/etc/systemd/system), never the host's:
#   vm-run.target   the default unit: basic.target (sysinit: journald, udev, tmpfiles,
#                   sockets, ...) and vm-run.service, nothing of multi-user.target
#   vm-run.service  bash guest-init.sh with VM_UNDER_SYSTEMD=1: the same run, output,
#                   exit code and power-off as the custom init, minus the mounts systemd
#                   made already
# Masked: what would act on a network the guest does not have or the host's own
# schedule (time sync, apt/dpkg/e2scrub timers), binfmt_misc (its automount, which
# systemd-binfmt triggers, never completes on this root: the boot hung there), and
# PackageKit (installed on the host, not on a bare Debian server: apt's hook starts it
# over D-Bus at every apt run, which then took minutes under TCG). Nothing else: the
# rest of sysinit and basic.target starts as on a server.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
U=/etc/systemd/system
mkdir -p "$U"
cat >"$U/vm-run.target" <<'EOF'
[Unit]
Description=vm.sh run-script (tools/vm/guest-systemd.sh)
Requires=basic.target vm-run.service
After=basic.target vm-run.service
AllowIsolate=yes
EOF
cat >"$U/vm-run.service" <<'EOF'
[Unit]
Description=vm.sh: the script under test
After=basic.target
[Service]
Type=exec
Environment=VM_UNDER_SYSTEMD=1
ExecStart=/bin/bash /vmrun/guest-init.sh
StandardOutput=journal+console
StandardError=journal+console
LimitNOFILE=65536
LimitMEMLOCK=infinity
EOF
for u in systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer \
         dpkg-db-backup.timer e2scrub_all.timer proc-sys-fs-binfmt_misc.automount \
         systemd-binfmt.service packagekit.service; do
  ln -sf /dev/null "$U/$u"
done
# The host's /etc/machine-id would make the guest claim the host's identity; a fresh
# one (not an empty file: that is "first boot", whose systemd-firstboot prompts on the
# console).
tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id
# A host that is a container (CI) has /.dockerenv in its root, which is ours: systemd
# would take the VM for a Docker container and skip what a container cannot do (udev,
# kernel modules, some mounts). The whiteout stays in the tmpfs layer.
rm -f /.dockerenv /run/.containerenv
# A Docker image's /usr/sbin/policy-rc.d ("exit 101") forbids maintainer scripts to
# start, restart or stop services (deb-systemd-invoke asks it): right for `docker
# build`, wrong for the server this guest plays. Debian installs none.
rm -f /usr/sbin/policy-rc.d
# /tmp is the host's /tmp seen through the overlay (guest-init.sh): systemd-tmpfiles
# would empty it at boot ("D /tmp", tmpfiles.d/tmp.conf), whiting out each of the host's
# files there over 9p, which took minutes; "d" keeps it as it is.
mkdir -p /etc/tmpfiles.d
printf 'd /tmp 1777 root root -\n' >/etc/tmpfiles.d/tmp.conf
exec /lib/systemd/systemd --unit=vm-run.target --log-target=console --show-status=1
