#!/usr/bin/env bash
# make image: ferry's OCI image from Debian packages, without Docker or a registry.
#
#   layer 1  a Debian 13 (trixie) root filesystem from Debian's archive (mmdebstrap, the
#            essential set plus the packages below: no apt, no compiler, no package lists)
#   layer 2  /opt/ferry: dist/, bin/, the compiled BPF objects, the production node_modules
#            and deploy/kubernetes, deploy/crds (what `ferry manifests` renders)
# Output: build/image/ferry.tar (an OCI archive, skopeo's oci-archive:) and build/image/oci/
# (the same as an OCI layout, for umoci unpack), build/image/ferry.json (digest and sizes).
# Cached: the Debian layer by this script's contents, the image by the hash of everything it
# carries; a second run with nothing changed does nothing. FERRY_IMAGE_FORCE=1 rebuilds.
# Same inputs and the same state of Debian's archive give the same image digest: every file
# time is SOURCE_DATE_EPOCH (the commit time of HEAD unless set).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=build/image
VERSION=$(node -p 'require("./package.json").version')
SUITE=trixie
MIRROR=${FERRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# nodejs (20.19 in trixie), libbpf1 (loaded through koffi), iproute2 (ip -j: devices; ip monitor: route changes),
# bpftool (ferry status/uninstall), frr (the BGP container), ca-certificates (the API server),
# iptables and nftables (ferry cleanup-kube-proxy).
PACKAGES=nodejs,libbpf1,iproute2,bpftool,frr,ca-certificates,iptables,nftables
# The image's default user; the agent's DaemonSet runs as root (see deploy/kubernetes).
UID_GID=65532
# FRR's user and groups, made before frr's postinst would pick free ids: the agent's vtysh
# opens FRR's sockets (mode 0770, group frrvty) through the DaemonSet's supplementalGroups,
# which must name this gid (test/e2e/image.test.ts checks they agree).
FRR_UID_GID=951
FRRVTY_GID=950
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
hist_opts() { echo --history.created="$created" --history.author=ferry --history.created_by="scripts/build-image.sh" --history.comment="$1"; }

for c in mmdebstrap umoci skopeo; do
  command -v "$c" >/dev/null || { echo "image: $c is missing (make setup)" >&2; exit 1; }
done
for f in dist/cli/main.js build/bpf/tc.bpf.o build/bpf/tc_compat.bpf.o build/bpf/sock.bpf.o build/bpf/sock_term.bpf.o; do
  [ -e "$f" ] || { echo "image: $f is missing (make build first)" >&2; exit 1; }
done
mkdir -p "$OUT"

hash_files() { sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1; }
BASE_KEY=$( { echo "$SUITE $MIRROR $PACKAGES"; cat "$0"; } | sha256sum | cut -d' ' -f1 | cut -c1-16)
APP_KEY=$( { echo "$BASE_KEY $SOURCE_DATE_EPOCH"; find dist bin build/bpf -maxdepth 1 -type f -print0 | hash_files;
  find dist deploy/kubernetes deploy/crds -type f -print0 | hash_files; sha256sum package.json package-lock.json; } | sha256sum | cut -d' ' -f1 | cut -c1-16)

if [ -z "${FERRY_IMAGE_FORCE:-}" ] && [ -f "$OUT/ferry.tar" ] && [ "$(cat "$OUT/inputs" 2>/dev/null)" = "$APP_KEY" ]; then
  echo "image: up to date ($OUT/ferry.tar, inputs $APP_KEY)"
  exit 0
fi
started=$(date +%s)

# Layer 1, cached by BASE_KEY.
BASE="$OUT/base-$BASE_KEY"
if [ ! -f "$BASE/index.json" ] || [ -n "${FERRY_IMAGE_FORCE:-}" ]; then
  rm -rf "$OUT"/base-* "$OUT/rootfs.tar"
  echo "image: Debian $SUITE with $PACKAGES"
  mmdebstrap --quiet --variant=essential --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --aptopt='Acquire::Languages "none"' \
    --essential-hook="echo 'frr:x:$FRR_UID_GID:' >> \"\$1/etc/group\"; echo 'frrvty:x:$FRRVTY_GID:frr' >> \"\$1/etc/group\"" \
    --essential-hook="echo 'frr:x:$FRR_UID_GID:$FRR_UID_GID::/nonexistent:/usr/sbin/nologin' >> \"\$1/etc/passwd\"" \
    --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
    --customize-hook="echo 'ferry:x:$UID_GID:$UID_GID:ferry:/nonexistent:/usr/sbin/nologin' >> \"\$1/etc/passwd\"" \
    --customize-hook="echo 'ferry:x:$UID_GID:' >> \"\$1/etc/group\"" \
    "$SUITE" "$OUT/rootfs.tar" "$MIRROR"
  rm -rf "$BASE.tmp" "$OUT/bundle"
  umoci init --layout "$BASE.tmp"
  umoci new --image "$BASE.tmp:ferry"
  umoci unpack --image "$BASE.tmp:ferry" "$OUT/bundle" >/dev/null
  tar -C "$OUT/bundle/rootfs" -xpf "$OUT/rootfs.tar"
  umoci repack $(hist_opts "debian-$SUITE") --refresh-bundle --image "$BASE.tmp:ferry" "$OUT/bundle"
  rm -rf "$OUT/bundle" "$OUT/rootfs.tar"
  mv "$BASE.tmp" "$BASE"
fi

# Layer 2: ferry itself.
STAGE="$OUT/stage/opt/ferry"
rm -rf "$OUT/stage" && mkdir -p "$STAGE/build/bpf"
cp -a dist bin package.json package-lock.json "$STAGE/"
cp build/bpf/*.bpf.o "$STAGE/build/bpf/"
mkdir -p "$STAGE/deploy" && cp -a deploy/kubernetes deploy/crds "$STAGE/deploy/" # ferry manifests
find "$STAGE/dist" -name '*.map' -delete
(cd "$STAGE" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
# koffi ships a prebuilt library for every platform; keep this one's.
arch=$(node -p '({ x64: "linux_x64", arm64: "linux_arm64" })[process.arch] ?? ""')
[ -n "$arch" ] || { echo "image: no koffi build for $(node -p process.arch)" >&2; exit 1; }
for d in "$STAGE"/node_modules/koffi/build/koffi/*; do [ "$(basename "$d")" = "$arch" ] || rm -rf "$d"; done
rm -rf "$STAGE"/node_modules/koffi/{src,vendor,doc} "$STAGE"/node_modules/.package-lock.json
chmod -R u=rwX,go=rX "$OUT/stage"
find "$OUT/stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

IMG="$OUT/oci.tmp"
rm -rf "$IMG" "$OUT/bundle"
cp -a "$BASE" "$IMG"
umoci unpack --image "$IMG:ferry" "$OUT/bundle" >/dev/null
cp -a "$OUT/stage/opt/ferry" "$OUT/bundle/rootfs/opt/"
touch -h -d "@$SOURCE_DATE_EPOCH" "$OUT/bundle/rootfs/opt" "$OUT/bundle/rootfs"
umoci repack $(hist_opts "ferry-$VERSION") --image "$IMG:ferry" "$OUT/bundle"
unpacked=$(du -sb "$OUT/bundle/rootfs" | cut -f1)
umoci config --no-history --image "$IMG:ferry" --created "$created" --author ferry \
  --config.user "$UID_GID:$UID_GID" --config.workingdir /opt/ferry \
  --config.entrypoint node --config.entrypoint /opt/ferry/bin/ferry.js --clear=config.cmd \
  --config.env NODE_ENV=production \
  --config.label "org.opencontainers.image.title=ferry" \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.created=$created" \
  --config.label "dev.ferry.debian=$SUITE" --config.label "dev.ferry.inputs=$APP_KEY"
umoci tag --image "$IMG:ferry" "$VERSION"
umoci rm --image "$IMG:ferry"
umoci gc --layout "$IMG"
rm -rf "$OUT/bundle" "$OUT/stage" "$OUT/oci" "$OUT/ferry.tar"
mv "$IMG" "$OUT/oci"
skopeo copy --quiet "oci:$OUT/oci:$VERSION" "oci-archive:$OUT/ferry.tar:ferry:$VERSION"

digest=$(skopeo inspect --format '{{.Digest}}' "oci:$OUT/oci:$VERSION")
archive=$(stat -c %s "$OUT/ferry.tar")
layers=$(skopeo inspect --format '{{len .Layers}}' "oci:$OUT/oci:$VERSION")
printf '{"version":"%s","digest":"%s","archiveBytes":%s,"unpackedBytes":%s,"layers":%s,"debian":"%s","inputs":"%s","sourceDateEpoch":%s}\n' \
  "$VERSION" "$digest" "$archive" "$unpacked" "$layers" "$SUITE" "$APP_KEY" "$SOURCE_DATE_EPOCH" > "$OUT/ferry.json"
echo "$APP_KEY" > "$OUT/inputs"
echo "image: $OUT/ferry.tar ferry:$VERSION $digest, $((archive / 1048576)) MiB compressed, $((unpacked / 1048576)) MiB unpacked, $layers layers, $(( $(date +%s) - started )) s"
