#!/usr/bin/env bash
# Builds the two images without a registry, from this checkout: the release binaries, a
# base for each made from Debian's packages (mmdebstrap), then Dockerfile.csi and
# Dockerfile.ccm as they are, through buildah. Each image is saved as an OCI archive.
#
#   deploy/images/build.sh OUT_DIR        # as root; OUT_DIR/overcast-{csi,ccm}.tar
#
# The images are named localhost/overcast-csi:dev and localhost/overcast-ccm:dev
# (OVERCAST_IMAGE_TAG sets the tag). What is in each and its size go to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: deploy/images/build.sh OUT_DIR}
tag=${OVERCAST_IMAGE_TAG:-dev}
mkdir -p "$out"
export DEBIAN_FRONTEND=noninteractive

need=()
for tool in mmdebstrap buildah podman; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends mmdebstrap buildah podman uidmap >/dev/null
fi

# `release` for images to ship; `debug` (OVERCAST_IMAGE_PROFILE=debug) reuses what
# `cargo test` already built, which is how CI builds them within its time (`built`: the
# same, without asking cargo).
profile=${OVERCAST_IMAGE_PROFILE:-release}
bins=(csi registrar ccm discoverer rbac-proxy capi)
echo "== $profile binaries" >&2
case "$profile" in
  # --workspace: the features `cargo test --workspace` built with, so nothing rebuilds.
  release) cargo build --workspace --release --locked "${bins[@]/#/--bin=}" >&2 ;;
  # Every binary, as .ci/run's build stage builds them: a narrower selection unifies
  # other features of the crates they share, and rebuilds them.
  debug) cargo build --workspace --locked --bins >&2 ;;
  # The debug binaries the caller has just built with `cargo build --workspace --bins`
  # (.ci/run): no cargo here, which would wait for the build directory's lock while the
  # caller goes on to build the test binaries.
  built) profile=debug ;;
  *) echo "OVERCAST_IMAGE_PROFILE is release or debug, not $profile" >&2; exit 2 ;;
esac
rm -rf dist && mkdir -p dist
for bin in "${bins[@]}"; do cp "${CARGO_TARGET_DIR:-target}/$profile/$bin" dist/; done

# The machine's own package sources (deb822 or one-line), so nothing here names a mirror.
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
# Neither documentation nor translations: nothing in the image reads them.
slim=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*')
work=$(mktemp -d /tmp/overcast-images.XXXXXX)
# What the build leaves in buildah's and podman's storage (the two images, their bases, the
# stages of the multi-stage Dockerfiles, a failed step's working container) is removed once
# the archives are written: about 1.5 GB a build, which filled the disk of a machine that
# builds often. Only what was not there before: the machine's other images are not ours.
images_before=$(podman images --all --quiet --no-trunc 2>/dev/null | sort -u)
containers_before=$(buildah containers --quiet --notruncate 2>/dev/null | sort -u)
cleanup() {
  local c i
  for c in $(comm -13 <(echo "$containers_before") <(buildah containers --quiet --notruncate 2>/dev/null | sort -u)); do
    buildah rm "$c" >/dev/null 2>&1 || true
  done
  for i in $(comm -13 <(echo "$images_before") <(podman images --all --quiet --no-trunc 2>/dev/null | sort -u)); do
    podman rmi --force "$i" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# OVERCAST_IMAGE_BASE_CACHE (a directory; .ci/run sets it) keeps the two bases between
# builds, keyed on what makes them: this script, the xfsprogs trim, the package sources
# and the archive's Release files this machine last fetched (a new package version in
# the archive changes them).
base_cache=${OVERCAST_IMAGE_BASE_CACHE:-}
base_key=$( (cat deploy/images/build.sh deploy/images/trim-xfsprogs.sh "$sources"; cat /var/lib/apt/lists/*Release 2>/dev/null) |
  sha256sum | cut -c1-16)
cached_bases=""
if [ -n "$base_cache" ] && [ -f "$base_cache/$base_key/csi-base.tar" ] && [ -f "$base_cache/$base_key/ccm-base.tar" ]; then
  cp "$base_cache/$base_key/csi-base.tar" "$base_cache/$base_key/ccm-base.tar" "$work/"
  cached_bases=1
  echo "== the images' Debian bases from $base_cache/$base_key" >&2
fi

if [ -z "$cached_bases" ]; then
echo "== base of the csi image: Debian minbase + e2fsprogs, xfsprogs, util-linux, mount (xfs_scrub and its python3 and ICU taken out)" >&2
mmdebstrap --quiet --variant=minbase --mode=root "${slim[@]}" \
  --include=e2fsprogs,xfsprogs,util-linux,mount \
  --customize-hook='chroot "$1" sh -c "$(cat deploy/images/trim-xfsprogs.sh)"' \
  --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" > "$1/.packages"' \
  --format=tar bookworm "$work/csi-base.tar" "$sources" >&2
# The ccm image needs glibc and libgcc alone (TLS is rustls): the packages are only
# unpacked (no shell, no package manager: what distroless/cc gives), with a root and a
# `nonroot` (65532) user as distroless has.
echo "== base of the ccm image: libc6, libgcc-s1, ca-certificates, tzdata, netbase (extracted)" >&2
mmdebstrap --quiet --variant=extract --mode=root "${slim[@]}" \
  --include=libc6,libgcc-s1,ca-certificates,tzdata,netbase \
  --format=tar bookworm "$work/ccm-base.tar" "$sources" >&2
# (mmdebstrap runs no hooks for `extract`: the users are added to the unpacked tree.)
root="$work/ccm-root"
mkdir -p "$root" && tar -xf "$work/ccm-base.tar" -C "$root"
mkdir -p "$root/etc" "$root/home/nonroot" "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
chown 65532:65532 "$root/home/nonroot"
chmod 1777 "$root/tmp"
printf 'libc6\nlibgcc-s1\nca-certificates\ntzdata\nnetbase\n' > "$root/.packages"
tar -cf "$work/ccm-base.tar" -C "$root" .
if [ -n "$base_cache" ]; then
  # Only one key's bases are kept: an older one is of a stale archive.
  rm -rf "$base_cache" && mkdir -p "$base_cache/$base_key"
  cp "$work/csi-base.tar" "$work/ccm-base.tar" "$base_cache/$base_key/"
fi
fi

for image in csi ccm; do
  podman import --quiet "$work/$image-base.tar" "localhost/overcast-$image-base:bookworm" >/dev/null
  buildah bud --quiet --isolation chroot --layers=false -f "Dockerfile.$image" \
    --build-arg BINARIES=prebuilt --build-arg "BASE=localhost/overcast-$image-base:bookworm" \
    -t "localhost/overcast-$image:$tag" . >/dev/null
  rm -f "$out/overcast-$image.tar"
  podman save --quiet --format oci-archive -o "$out/overcast-$image.tar" "localhost/overcast-$image:$tag"
  size=$(podman image inspect --format '{{.Size}}' "localhost/overcast-$image:$tag")
  tar -xOf "$work/$image-base.tar" ./.packages > "$out/overcast-$image.packages"
  echo "overcast-$image: localhost/overcast-$image:$tag, $((size / 1024 / 1024)) MiB unpacked, $(($(stat -c %s "$out/overcast-$image.tar") / 1024 / 1024)) MiB archive, $(wc -l < "$out/overcast-$image.packages") Debian packages (listed in $out/overcast-$image.packages)"
done
