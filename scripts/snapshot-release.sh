#!/usr/bin/env bash
# Build ferry at a commit and pack what a node runs (bin/, dist/ without source maps, the
# BPF objects, package.json) into a tarball: a previous release, for the upgrade tests.
#   scripts/snapshot-release.sh <commit> <out.tar.gz>
# The tarball has no node_modules: unpacked beside a checkout's node_modules (a link), it
# runs with the current dependencies, as long as package.json's dependencies are unchanged.
set -euo pipefail
commit=${1:?commit}
out=$(realpath -m "${2:?output tarball}")
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/src" "$commit" >/dev/null
cd "$work/src"
ln -s "$repo/node_modules" node_modules
npx tsc -p tsconfig.json
node bin/ferry.js compile >/dev/null
find dist -name '*.map' -delete
find dist -name '*.js' -exec sed -i '/^\/\/# sourceMappingURL=/d' {} +
echo "$commit" > RELEASE
tar --sort=name --owner=0 --group=0 --mtime=@0 -czf "$out.tmp" RELEASE package.json bin dist build/bpf/tc.bpf.o build/bpf/sock.bpf.o
mv "$out.tmp" "$out"
echo "$out: $(du -h "$out" | cut -f1) from $commit"
