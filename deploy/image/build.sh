#!/usr/bin/env bash
# Builds the product's OCI image from Debian's packages and PyPI, and prints its tag and digest.
#
#   deploy/image/build.sh          build the image of the work tree (a clean commit's is reused)
#   deploy/image/build.sh --lock   re-resolve requirements.lock from pyproject.toml (PyPI)
#
# There is no container engine and no registry of base images: mmdebstrap makes a bookworm root
# filesystem from Debian's archive, and umoci turns layer archives into an OCI image layout,
# $GPUCAAS_IMAGE_CACHE (default ~/.cache/gpucaas/image)/oci. Two layers:
#   base     the Essential:yes set and debian-packages (mmdebstrap), and the PyPI dependencies
#            pinned with their hashes in requirements.lock, in a venv at /opt/gpucaas; tagged
#            base-<hash of its inputs> and reused while they are unchanged;
#   product  the gpucaas wheel installed into that venv, its gRPC stubs generated there.
# The image's tag is the commit's short hash, with -dirty when the work tree has changes; a
# clean commit's image is built once. Reproducible: each layer's times are clamped to a commit's
# time (SOURCE_DATE_EPOCH: the base's is the last commit of its package lists, the product's
# is HEAD's), the archives are sorted with numeric owners and no atime/ctime, the bytecode is
# hash-based, and the config's times are those commits' too; two builds of one commit from the
# same Debian archive give the same manifest digest. The Debian packages that went in are
# compared with debian-packages.lock (the archive moves on with point releases; a difference is
# reported). Needs root (mmdebstrap's unshare mode, chroot), mmdebstrap and umoci (`make image`
# installs them) and the repository's .venv (the wheel is built with its setuptools).
set -euo pipefail
umask 022
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${GPUCAAS_IMAGE_PYTHON:-$repo/.venv/bin/python}"
cache="${GPUCAAS_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpucaas/image}"
layout="$cache/oci"
lock="$here/requirements.lock"
venv=/opt/gpucaas
site="$venv/lib/python3.11/site-packages"
pip_wheel="$(sed -n 's/^pip==\([^ ]*\) .*/pip-\1-py3-none-any.whl/p' "$lock" 2>/dev/null || true)"
say() { echo "deploy/image/build.sh: $*" >&2; }

if [ "${1:-}" = --lock ]; then
  # The runtime dependencies (not the dev extras) as PyPI resolves them now for this Python
  # (3.11, manylinux x86_64), each with the hash of its wheel; libvirt-python is Debian's.
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  "$py" -c 'import tomllib, sys
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print("\n".join(["pip"] + [d for d in deps if not d.startswith("libvirt-python")]))' "$repo/pyproject.toml" >"$work/in.txt"
  env -u PIP_FIND_LINKS "$py" -m pip install -q --dry-run --ignore-installed --only-binary :all: \
    --report "$work/report.json" -r "$work/in.txt"
  "$py" - "$work/report.json" >"$lock" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
print("# deploy/image/build.sh --lock: the image's PyPI packages, pinned with their wheels' hashes.")
print("# pip runs from its wheel to install the others and is not installed itself.")
for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    print(f"{name}=={version} --hash=sha256:{item['download_info']['archive_info']['hashes']['sha256']}")
EOF
  say "wrote $lock ($(grep -vc '^#' "$lock") packages)"
  exit 0
fi

in_root() {  # in_root ROOT COMMAND...: run in the root filesystem, with none of this machine's environment
  local root=$1; shift
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "$@"
}

base_hook() {  # base_hook ROOT WHEELS OUT: mmdebstrap's customize hook, the PyPI side of the base
  local root=$1
  mkdir "$root/tmp/wheels"
  cp "$2"/*.whl "$root/tmp/wheels/"
  grep -v '^pip==' "$lock" >"$root/tmp/wheels/requirements.txt"
  in_root "$root" python3 -m venv --system-site-packages --without-pip "$venv"
  in_root "$root" "$venv/bin/python" "/tmp/wheels/$pip_wheel/pip" install -q \
    --no-index --find-links /tmp/wheels --no-deps --no-compile --no-cache-dir --require-hashes --only-binary :all: \
    -r /tmp/wheels/requirements.txt
  # hash-based bytecode: valid whatever the files' times, never rewritten (the root is read-only)
  in_root "$root" "$venv/bin/python" -m compileall -q --invalidation-mode unchecked-hash "$site"
  rm -rf "$root/tmp/wheels"
  echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"
  echo 'nonroot:x:65532:' >>"$root/etc/group"
  # mmdebstrap copies the host's; the runtime mounts its own over them
  : >"$root/etc/resolv.conf"
  : >"$root/etc/hostname"
  in_root "$root" dpkg-query -W -f '${binary:Package} ${Version}\n' >"$3/debian-packages.lock"
}
if [ "${1:-}" = --base-hook ]; then base_hook "$2" "$3" "$4"; exit 0; fi

[ "$(id -u)" = 0 ] || { say "needs root (mmdebstrap, chroot): run it as root or with sudo"; exit 1; }
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { say "$tool is missing: \`make image\` installs it (apt-get install $tool)"; exit 1; }
done

git=(git -C "$repo")
sha=$("${git[@]}" rev-parse --short=12 HEAD)
tag=$sha
[ -z "$("${git[@]}" status --porcelain)" ] || tag=$sha-dirty
product_epoch=$("${git[@]}" log -1 --format=%ct HEAD)
base_epoch=$("${git[@]}" log -1 --format=%ct -- deploy/image/debian-packages deploy/image/requirements.lock)
base_epoch=${base_epoch:-$product_epoch}
rfc3339() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }

manifest_of() {  # manifest_of TAG [layers]: the tag's manifest digest, or its layers' blob names
  "$py" - "$layout" "$@" <<'EOF'
import json, sys
layout, tag, *layers = sys.argv[1:]
index = json.load(open(f"{layout}/index.json"))
ref = "org.opencontainers.image.ref.name"
digest = next(m["digest"] for m in index["manifests"] if m.get("annotations", {}).get(ref) == tag)
if layers:
    manifest = json.load(open(f"{layout}/blobs/sha256/{digest.split(':')[1]}"))
    digest = " ".join(layer["digest"].split(":")[1] for layer in manifest["layers"])
print(digest)
EOF
}
has_tag() { [ -f "$layout/index.json" ] && umoci ls --layout "$layout" | grep -qx "$1"; }
done_line() { echo "gpucaas:$tag $(manifest_of "$tag") oci:$layout:$tag"; }

if [ "$tag" = "$sha" ] && has_tag "$tag" && [ -z "${GPUCAAS_IMAGE_REBUILD:-}" ]; then done_line; exit 0; fi

mkdir -p "$cache/wheels"
# one build at a time per cache (umoci does not lock its layout)
exec 9>"$cache/lock"
flock 9
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucaas-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -f "$layout/index.json" ] || umoci init --layout "$layout"

# what a layer archive is made with: sorted, numeric owners, no atime/ctime, mtimes clamped
tar_opts=(--sort=name --numeric-owner --format=pax --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime
  --clamp-mtime)

build_base() {  # build_base TAG
  local t=$SECONDS
  env -u PIP_FIND_LINKS "$py" -m pip download -q --no-deps --only-binary :all: --require-hashes -r "$lock" \
    -d "$cache/wheels"
  local packages
  packages=$(sed 's/#.*//' "$here/debian-packages" | xargs | tr ' ' ,)
  SOURCE_DATE_EPOCH=$base_epoch mmdebstrap --quiet --mode=unshare --variant=essential --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --customize-hook="'$here/build.sh' --base-hook \"\$1\" '$cache/wheels' '$work'" \
    bookworm "$work/base.tar"
  # the runtime mounts /dev: the layer keeps the folder only
  tar --wildcards --delete -f "$work/base.tar" './dev/?*'
  umoci new --image "$layout:$1"
  umoci raw add-layer --image "$layout:$1" --history.created="$(rfc3339 "$base_epoch")" \
    --history.created_by="deploy/image/build.sh: mmdebstrap bookworm, debian-packages, requirements.lock" \
    "$work/base.tar"
  cp "$work/debian-packages.lock" "$cache/$1.debian-packages"
  # earlier bases go, and the blobs no tag uses
  for old in $(umoci ls --layout "$layout" | grep '^base-' | grep -vx "$1"); do
    umoci rm --image "$layout:$old"; rm -f "$cache/$old.debian-packages"
  done
  umoci gc --layout "$layout"
  say "built the base layer $1 in $((SECONDS - t)) s"
}

build_product() {  # build_product BASE_TAG
  local t=$SECONDS root="$work/rootfs"
  # the wheel, from the work tree's files (tracked, and untracked but not ignored)
  mkdir "$work/src" "$work/dist" "$root"
  "${git[@]}" ls-files -z -co --exclude-standard | (cd "$repo" && tar --null -T - -cf -) | tar -C "$work/src" -xf -
  SOURCE_DATE_EPOCH=$product_epoch "$py" -m pip wheel -q --no-deps --no-build-isolation --no-index \
    -w "$work/dist" "$work/src"
  # the base's root filesystem, to install into
  local layer
  for layer in $(manifest_of "$1" layers); do
    tar -C "$root" --numeric-owner -xzf "$layout/blobs/sha256/$layer"
  done
  (cd "$root" && find . -mindepth 1 | sort) >"$work/before"
  mkdir "$root/tmp/wheels"
  cp "$work"/dist/gpucaas-*.whl "$cache/wheels/$pip_wheel" "$root/tmp/wheels/"
  in_root "$root" "$venv/bin/python" "/tmp/wheels/$pip_wheel/pip" install -q \
    --no-index --find-links /tmp/wheels --no-deps --no-compile --no-cache-dir gpucaas
  rm -rf "$root/tmp/wheels"
  # the gRPC stubs, generated where the product runs (its root filesystem is read-only)
  in_root "$root" "$venv/bin/python" -m services.device_plugin.api.build >/dev/null
  in_root "$root" "$venv/bin/python" -m services.dra_driver.api.build >/dev/null
  in_root "$root" "$venv/bin/python" -m compileall -q --invalidation-mode unchecked-hash \
    "$site/gpucaas" "$site/core" "$site/services" "$site/vm_images"
  (cd "$root" && find . -mindepth 1 | sort) >"$work/after"
  comm -13 "$work/before" "$work/after" >"$work/new"
  tar -C "$root" "${tar_opts[@]}" --mtime="@$product_epoch" --no-recursion -T "$work/new" -cf "$work/product.tar"
  umoci raw add-layer --image "$layout:$1" --tag "$tag" --history.created="$(rfc3339 "$product_epoch")" \
    --history.created_by="deploy/image/build.sh: the gpucaas wheel of $sha$([ "$tag" = "$sha" ] || echo ' with changes')" \
    "$work/product.tar"
  umoci config --image "$layout:$tag" --no-history --created="$(rfc3339 "$product_epoch")" \
    --os=linux --architecture=amd64 --config.user=65532:65532 --config.workingdir=/ \
    --config.entrypoint="$venv/bin/gpucaas" \
    --config.env="PATH=$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --config.env=PYTHONDONTWRITEBYTECODE=1 --config.env=PYTHONUNBUFFERED=1 \
    --config.label="org.opencontainers.image.revision=$("${git[@]}" rev-parse HEAD)" \
    --config.label="org.opencontainers.image.version=$tag" \
    --config.label="org.opencontainers.image.source=https://github.com/gpucaas/gpucaas"
  umoci gc --layout "$layout"  # the blobs of a tag built again (a changed work tree's)
  say "built the product layer in $((SECONDS - t)) s"
}

base_key=$( (cat "$here/debian-packages" "$lock"; declare -f base_hook build_base; echo "$base_epoch"
             mmdebstrap --version; umoci --version) | sha256sum | cut -c1-12)
has_tag "base-$base_key" || build_base "base-$base_key"
if ! grep -v '^#' "$here/debian-packages.lock" | diff -u - "$cache/base-$base_key.debian-packages" >"$work/packages.diff"; then
  say "the base's Debian packages differ from deploy/image/debian-packages.lock (Debian's archive moved on, or the list changed):"
  cat "$work/packages.diff" >&2
fi
build_product "base-$base_key"
done_line
