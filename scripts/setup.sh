#!/usr/bin/env bash
# Idempotent machine setup for building and testing ferry (Debian 12, as root):
# Debian packages, npm dependencies, bpffs. Fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(clang llvm libbpf-dev libbpf1 bpftool iproute2 iputils-ping iperf3 iptables nftables util-linux procps gcc libc6-dev linux-libc-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]} (run make setup as root)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# kubectl for the sandbox tests: Debian's, unless the machine already has one.
if ! command -v kubectl >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing kubectl (kubernetes-client)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
fi

# npm ci when node_modules is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi

# bpffs, where the agent pins its maps.
if ! mount | grep -q ' /sys/fs/bpf type bpf '; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup: mounting bpffs at /sys/fs/bpf"
    mkdir -p /sys/fs/bpf
    mount -t bpf bpf /sys/fs/bpf
  else
    echo "setup: bpffs is not mounted at /sys/fs/bpf (run make setup as root)" >&2
  fi
fi

# cgroup v2: the socket hooks attach there. Debian 12 with a hybrid layout has it at
# /sys/fs/cgroup/unified; a pure v2 host at /sys/fs/cgroup.
if [ ! -f /sys/fs/cgroup/unified/cgroup.procs ] && [ ! -f /sys/fs/cgroup/cgroup.procs ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "setup: mounting cgroup2 at /sys/fs/cgroup/unified"
    mkdir -p /sys/fs/cgroup/unified
    mount -t cgroup2 none /sys/fs/cgroup/unified
  fi
fi
