#!/usr/bin/env bash
# Builds the pinned upstream binaries (Kubernetes, etcd, kwok, the node's containerd and its lazy
# pulling snapshotter, stargz, the sandbox's ingress controller, Traefik, and its cluster DNS,
# CoreDNS; Helm, Kueue and Cilium when asked for) from
# their Go modules into a cache outside the work tree, and prints the folder that holds them.
#
#   upstream/build.sh            build what is missing, print the bin folder
#   upstream/build.sh --print    print the bin folder only (nothing built)
#   GPUCAAS_CILIUM=1 upstream/build.sh   also build Cilium (agent, generic operator, cilium-dbg, CNI plugin;
#                                each build is long), opt-in: nothing uses it yet (docs/cilium-feasibility.md)
#   GPUCAAS_HELM=1 upstream/build.sh     also build Helm (`make helm`), for what installs the chart with it
#   GPUCAAS_KUEUE=1 upstream/build.sh    also build Kueue's manager (`make kueue`), with its CRDs and webhook
#                                manifests beside it in kueue-manifests/ (docs/queues.md)
#
# The folder's name carries a hash of the pins (each wrapper module's go.mod and go.sum, and
# the version flags), so a changed pin builds a fresh folder and an unchanged one is reused.
# KUBEBUILDER_ASSETS or GPUCAAS_KUBE_BIN naming a folder with the binaries wins: nothing is
# built. Needs Go >= 1.26 (the pinned Kubernetes release's go.mod says so).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
KUBE_VERSION=v1.36.3
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
CONTAINERD_VERSION=v2.4.2
NODE_BINARIES=(containerd containerd-shim-runc-v2 ctr)
TRAEFIK_VERSION=v3.6.12
COREDNS_VERSION=v1.15.0
HELM_VERSION=v3.22.0
KUEUE_VERSION=v0.17.0
CILIUM_VERSION=v1.20.2
CILIUM_BINARIES=(cilium-agent cilium-operator-generic cilium-dbg cilium-cni)
STARGZ_VERSION=v0.19.1
# the stargz snapshotter's service and an eStargz converter: commands of ours around its library
# (upstream/stargz; the module's own cmd module is not on the module proxy)
STARGZ_BINARIES=(gpucaas-stargz-grpc gpucaas-estargz)
ALL_BINARIES=("${KUBE_BINARIES[@]}" etcd etcdctl kwok kwok-stages "${NODE_BINARIES[@]}" "${STARGZ_BINARIES[@]}" traefik coredns)
if [ "${GPUCAAS_CILIUM:-}" = 1 ]; then ALL_BINARIES+=("${CILIUM_BINARIES[@]}"); fi
if [ "${GPUCAAS_HELM:-}" = 1 ]; then ALL_BINARIES+=(helm); fi
if [ "${GPUCAAS_KUEUE:-}" = 1 ]; then ALL_BINARIES+=(kueue); fi

given="${GPUCAAS_KUBE_BIN:-${KUBEBUILDER_ASSETS:-}}"
if [ -n "$given" ]; then
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd; do
    [ -x "$given/$b" ] || { echo "upstream/build.sh: $given (GPUCAAS_KUBE_BIN/KUBEBUILDER_ASSETS) has no executable $b" >&2; exit 1; }
  done
  echo "$given"; exit 0
fi

v=component-base/version
kube_ld="-X k8s.io/$v.gitVersion=$KUBE_VERSION -X k8s.io/$v.gitMajor=1 -X k8s.io/$v.gitMinor=36 -X k8s.io/$v.gitTreeState=clean -X k8s.io/$v.buildDate=2026-07-22T18:07:38Z -X k8s.io/$v.gitCommit="
kube_ld="$kube_ld -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=36"
# what decides the binaries: the modules pinned and the flags they are built with
GOFLAGS_USED="CGO_ENABLED=0 -trimpath -s -w"
control=(etcd kubernetes kwok)
pins=$( (echo "$KUBE_VERSION $kube_ld $GOFLAGS_USED"; for m in "${control[@]}"; do cat "$here/$m/go.mod"; done
         for m in "${control[@]}"; do cat "$here/$m/go.sum"; done) | sha256sum | cut -c1-12)
# containerd's pins are stamped beside its binaries: a new pin rebuilds those three only
ctr_tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs"
ctr_ld="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
node_pins=$( (echo "$ctr_tags $ctr_ld $GOFLAGS_USED"; cat "$here/containerd/go.mod" "$here/containerd/go.sum") | sha256sum | cut -c1-12)
# so are Traefik's
traefik_ld="-X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION"
traefik_pins=$( (echo "$traefik_ld $GOFLAGS_USED"; cat "$here/traefik/go.mod" "$here/traefik/go.sum") | sha256sum | cut -c1-12)
# and the stargz snapshotter's (its version is its module's)
stargz_pins=$( (echo "$STARGZ_VERSION $GOFLAGS_USED"; cat "$here/stargz/go.mod" "$here/stargz/go.sum" "$here"/stargz/*/main.go) | sha256sum | cut -c1-12)
# and CoreDNS's (its version is a constant of its module: nothing to stamp)
coredns_pins=$( (echo "$COREDNS_VERSION $GOFLAGS_USED"; cat "$here/coredns/go.mod" "$here/coredns/go.sum") | sha256sum | cut -c1-12)
# and Helm's (the version variables its release build sets; the Kubernetes version its `helm
# template` and lint assume by default is that of its client-go, v0.37)
h=helm.sh/helm/v3
helm_ld="-X $h/internal/version.version=$HELM_VERSION -X $h/internal/version.gitTreeState=clean"
helm_ld="$helm_ld -X $h/pkg/chartutil.k8sVersionMajor=1 -X $h/pkg/chartutil.k8sVersionMinor=37"
helm_ld="$helm_ld -X $h/pkg/lint/rules.k8sVersionMajor=1 -X $h/pkg/lint/rules.k8sVersionMinor=37"
helm_pins=$( (echo "$helm_ld $GOFLAGS_USED"; cat "$here/helm/go.mod" "$here/helm/go.sum") | sha256sum | cut -c1-12)
# and Kueue's (the version its release build stamps; its CRDs, webhook configurations and RBAC
# roles, from the same module version, lie beside the binary in kueue-manifests/)
kueue_ld="-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
kueue_pins=$( (echo "$kueue_ld $GOFLAGS_USED"; cat "$here/kueue/go.mod" "$here/kueue/go.sum") | sha256sum | cut -c1-12)
# and Cilium's (with its BPF sources, which the agent compiles at run time, beside the binaries)
cilium_ld="-X github.com/cilium/cilium/pkg/version.ciliumVersion=${CILIUM_VERSION#v}"
cilium_pins=$( (echo "$cilium_ld osusergo $GOFLAGS_USED"; cat "$here/cilium/go.mod" "$here/cilium/go.sum") | sha256sum | cut -c1-12)
cache="${GPUCAAS_UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpucaas/upstream}"
bin="$cache/$KUBE_VERSION-$pins/bin"
if [ "${1:-}" = "--print" ]; then echo "$bin"; exit 0; fi

if [ "$(cat "$bin/containerd.pins" 2>/dev/null)" != "$node_pins" ]; then
  for b in "${NODE_BINARIES[@]}"; do rm -f "$bin/$b"; done
fi
if [ "$(cat "$bin/traefik.pins" 2>/dev/null)" != "$traefik_pins" ]; then rm -f "$bin/traefik"; fi
if [ "$(cat "$bin/stargz.pins" 2>/dev/null)" != "$stargz_pins" ]; then for b in "${STARGZ_BINARIES[@]}"; do rm -f "$bin/$b"; done; fi
if [ "$(cat "$bin/coredns.pins" 2>/dev/null)" != "$coredns_pins" ]; then rm -f "$bin/coredns"; fi
if [ "$(cat "$bin/helm.pins" 2>/dev/null)" != "$helm_pins" ]; then rm -f "$bin/helm"; fi
if [ "$(cat "$bin/kueue.pins" 2>/dev/null)" != "$kueue_pins" ] || [ ! -d "$bin/kueue-manifests/crd" ]; then
  rm -rf "$bin/kueue" "$bin/kueue-manifests"
fi
# (binaries without their stamp or their BPF sources are from a build that did not finish)
if [ -e "$bin/cilium-agent" ] && { [ "$(cat "$bin/cilium.pins" 2>/dev/null)" != "$cilium_pins" ] || [ ! -d "$bin/cilium-lib/bpf" ]; }; then
  for b in "${CILIUM_BINARIES[@]}"; do rm -f "$bin/$b"; done; rm -rf "$bin/cilium-lib" "$bin/cilium.pins"
fi
missing=()
for b in "${ALL_BINARIES[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then echo "$bin"; exit 0; fi

if ! command -v go >/dev/null; then
  echo "upstream/build.sh: Go 1.26 or newer is needed to build ${missing[*]}: install it from https://go.dev/dl (or set GPUCAAS_KUBE_BIN to a folder of prebuilt binaries)" >&2; exit 1
fi
gov=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n1.26\n' "$gov" | sort -V | head -1)" != 1.26 ]; then
  echo "upstream/build.sh: Go $gov is too old: the pinned Kubernetes $KUBE_VERSION needs Go 1.26 or newer (install it, or set GPUCAAS_KUBE_BIN)" >&2; exit 1
fi

mkdir -p "$bin"
start=$SECONDS
# Every module the missing binaries need is downloaded first, all modules at once in the
# background: on a new machine the downloads (network) then overlap the first builds (CPU)
# instead of each build waiting for its own. Go's module cache locks what two fetch at once.
module_of() {  # the wrapper module (a folder here) a binary is built from
  case "$1" in
    etcd|etcdctl) echo etcd ;; kwok|kwok-stages) echo kwok ;; containerd|containerd-shim-runc-v2|ctr) echo containerd ;;
    gpucaas-stargz-grpc|gpucaas-estargz) echo stargz ;;
    traefik) echo traefik ;; coredns) echo coredns ;; helm) echo helm ;; kueue) echo kueue ;; cilium-*) echo cilium ;; *) echo kubernetes ;;
  esac
}
fetch=()
for b in "${missing[@]}"; do fetch+=("$(module_of "$b")"); done
for m in $(printf '%s\n' "${fetch[@]}" | sort -u); do
  (cd "$here/$m" && go mod download >/dev/null 2>&1 || true) &
done
build() {  # build <binary> <package> [ldflags] [tags], in the binary's module
  local t=$SECONDS
  (cd "$here/$(module_of "$1")" && CGO_ENABLED=0 go build -trimpath -tags "${4:-}" -ldflags "-s -w ${3:-}" -o "$bin/$1.tmp" "$2")
  mv "$bin/$1.tmp" "$bin/$1"
  echo "upstream/build.sh: built $1 in $((SECONDS - t)) s" >&2
}
for b in "${missing[@]}"; do
  case "$b" in
    etcd) build etcd go.etcd.io/etcd/server/v3 ;;
    etcdctl) build etcdctl go.etcd.io/etcd/etcdctl/v3 ;;
    kwok) build kwok sigs.k8s.io/kwok/cmd/kwok ;;
    kwok-stages) build kwok-stages ./stages ;;
    containerd|containerd-shim-runc-v2|ctr) build "$b" "github.com/containerd/containerd/v2/cmd/$b" "$ctr_ld" "$ctr_tags" ;;
    gpucaas-stargz-grpc) build "$b" ./snapshotter ;;
    gpucaas-estargz) build "$b" ./convert ;;
    traefik) build traefik github.com/traefik/traefik/v3/cmd/traefik "$traefik_ld" ;;
    coredns) build coredns github.com/coredns/coredns ;;
    helm) build helm "$h/cmd/helm" "$helm_ld" ;;
    kueue) build kueue sigs.k8s.io/kueue/cmd/kueue "$kueue_ld" ;;
    cilium-agent) build cilium-agent github.com/cilium/cilium/daemon "$cilium_ld" osusergo ;;
    cilium-operator-generic) build cilium-operator-generic github.com/cilium/cilium/operator "$cilium_ld" osusergo,ipam_provider_operator ;;
    cilium-dbg) build cilium-dbg github.com/cilium/cilium/cilium-dbg "$cilium_ld" osusergo ;;
    cilium-cni) build cilium-cni github.com/cilium/cilium/plugins/cilium-cni "$cilium_ld" osusergo ;;
    *) build "$b" "k8s.io/kubernetes/cmd/$b" "$kube_ld" ;;
  esac
done
wait  # the downloads, all needed by now
echo "$node_pins" >"$bin/containerd.pins"
echo "$traefik_pins" >"$bin/traefik.pins"
echo "$stargz_pins" >"$bin/stargz.pins"
echo "$coredns_pins" >"$bin/coredns.pins"
if [ -x "$bin/helm" ]; then echo "$helm_pins" >"$bin/helm.pins"; fi
if [ -x "$bin/kueue" ] && [ ! -d "$bin/kueue-manifests/crd" ]; then
  # the CRDs (with the patches that make some convert by webhook), the webhook configurations and
  # the RBAC roles of the same module version, for what runs the binary
  src=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  rm -rf "$bin/kueue-manifests"; mkdir "$bin/kueue-manifests"
  cp -r "$src/config/components/crd" "$src/config/components/webhook" "$src/config/components/rbac" "$bin/kueue-manifests/"
  chmod -R u+w "$bin/kueue-manifests"
  echo "$kueue_pins" >"$bin/kueue.pins"
fi
if [ "${GPUCAAS_CILIUM:-}" = 1 ]; then
  # the datapath's C sources, from the same module version: the agent compiles them at run time
  # from <--lib-dir>/bpf (clang >= 18.1 on its PATH)
  src=$(cd "$here/cilium" && go list -m -f '{{.Dir}}' github.com/cilium/cilium)
  rm -rf "$bin/cilium-lib"; mkdir "$bin/cilium-lib"; cp -r "$src/bpf" "$bin/cilium-lib/bpf"; chmod -R u+w "$bin/cilium-lib"
  echo "$cilium_pins" >"$bin/cilium.pins"
fi
echo "upstream/build.sh: $bin ready in $((SECONDS - start)) s" >&2
# folders of earlier pins go (each is ~500 MB)
for old in "$cache"/*/; do [ "${old%/}" = "${bin%/bin}" ] || rm -rf "$old"; done
echo "$bin"
