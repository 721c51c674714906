#!/usr/bin/env bash
# Idempotent machine setup for building and testing ferry (Debian 12, as root):
# Debian packages, npm dependencies, bpffs. Fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every Debian package the build, the tests, the demo and the benchmarks use:
#   build:       clang llvm (BPF objects), libbpf-dev linux-libc-dev (the only headers they
#                see), libbpf1 (loaded through koffi), gcc libc6-dev (the libbpf ABI probe)
#   tests, demo: iproute2 (ip, tc), iputils-ping, iputils-arping (who answers ARP, L2
#                announcements), curl, util-linux (nsenter, unshare, taskset), mount,
#                procps (sysctl), bpftool (ferry status), ethtool (the sandbox switch made
#                fit for XDP: full checksums on the wire)
#   bgp:         frr (the sandbox's router and nodes; vtysh checks ferry's configuration)
#   benchmarks:  iperf3, iptables, nftables (kube-proxy-shaped rules), netsniff-ng (trafgen:
#                the packets-per-second generator), linux-perf (perf: the connect trace's
#                per-hop timestamps)
#   image:       mmdebstrap (the Debian root filesystem), umoci and skopeo (the OCI image),
#                runc (the test that runs the agent from it)
#   sandbox:     openssl (its API server's CA and serving certificate)
PACKAGES=(clang llvm libbpf-dev libbpf1 linux-libc-dev gcc libc6-dev
  iproute2 iputils-ping iputils-arping curl util-linux mount procps bpftool ethtool
  frr iperf3 iptables nftables netsniff-ng linux-perf mmdebstrap umoci skopeo runc openssl)
# The commands those packages must have put on PATH; checked at the end.
COMMANDS=(clang cc bpftool ethtool ip tc ping arping vtysh curl nsenter unshare taskset mount sysctl iperf3 iptables-restore nft trafgen perf kubectl mmdebstrap umoci skopeo runc openssl)

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

# The frr package may start FRR for the machine itself; ferry's tests run their own, in
# their namespaces, and need none in the root namespace.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet frr 2>/dev/null; then
  systemctl disable --now frr >/dev/null 2>&1 || true
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

missing_cmds=()
for c in "${COMMANDS[@]}"; do command -v "$c" >/dev/null 2>&1 || missing_cmds+=("$c"); done
if [ ${#missing_cmds[@]} -gt 0 ]; then
  echo "setup: commands still missing after setup: ${missing_cmds[*]}" >&2
  [ "$(id -u)" -ne 0 ] || exit 1
fi
