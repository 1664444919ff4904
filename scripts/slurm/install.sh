#!/usr/bin/env bash
# Installs a single-node Slurm (controller, node daemon, client tools) and munge from Debian, for the Slurm
# integration test (test/cluster.slurm-jobs.test.ts). No systemd is needed: the test starts the daemons itself.
# Exits 0 when the tools are already there; non-zero (with the reason) when they cannot be installed.
set -euo pipefail
if command -v sbatch >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; then
  echo "slurm: already installed ($(dpkg-query -W -f '${Version}' slurm-client 2>/dev/null || echo unknown version))"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then echo "slurm: no apt-get here" >&2; exit 1; fi
if [ "$(id -u)" != 0 ]; then echo "slurm: installing needs root" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge
echo "slurm: installed ($(dpkg-query -W -f '${Version}' slurm-client))"
