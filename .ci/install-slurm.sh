#!/usr/bin/env bash
# Install a single-node SLURM (Debian/Ubuntu packages, SLURM 22.05 on bookworm) for the SLURM tests.
#
# Idempotent and quiet: does nothing when the daemons and clients are already installed.
# Installs the packages only; it starts nothing and writes no slurm.conf. The tests
# (tests/slurm_cluster.py) start munged, slurmctld and slurmd themselves with a generated
# slurm.conf in a temporary directory and stop them again at the end.
# Needs root (CI runs as root). Usage: bash .ci/install-slurm.sh
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge)
binaries=(slurmctld slurmd sbatch squeue scontrol munged)

missing=0
for b in "${binaries[@]}"; do
    if ! command -v "$b" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$b" ]; then
        missing=1
    fi
done
if [ "$missing" = 0 ]; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "install-slurm.sh: needs root to apt-get install ${packages[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# Keep the packages' maintainer scripts from starting services (there is no systemd here, and a
# half-configured slurmctld would only slow every later `snakemake` start): a temporary
# policy-rc.d that denies every start, removed again on exit unless one existed before.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

apt_install() {
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}
# Package lists may be missing (fresh container) or stale: update once and retry.
if ! apt_install 2>/dev/null; then
    apt-get update -qq >/dev/null
    apt_install
fi

# Report what is now installed (one line).
echo "install-slurm.sh: $(slurmctld -V 2>/dev/null || echo 'slurmctld ?') installed"
