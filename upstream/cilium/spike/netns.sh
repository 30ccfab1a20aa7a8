#!/usr/bin/env bash
# The Cilium spike's node network (docs/cilium-feasibility.md): one network namespace with
# a veth pair (eth0 10.10.0.2/24, the node's device; peer0 10.10.0.1/24, its "gateway"), and
# a bpffs for the agent outside /sys (ip netns exec mounts a fresh sysfs over /sys, so the
# spike binds this one over /sys/fs/bpf inside each ip netns exec; see in_ns).
#   netns.sh up | down | in_ns <command...>
set -euo pipefail
NS=cilium-spike
BPFFS=/run/cilium-spike/bpffs
case "${1:-}" in
  up)
    ip netns add $NS
    ip -n $NS link set lo up
    ip -n $NS link add eth0 type veth peer name peer0
    ip -n $NS addr add 10.10.0.2/24 dev eth0
    ip -n $NS addr add 10.10.0.1/24 dev peer0
    ip -n $NS link set eth0 up
    ip -n $NS link set peer0 up
    ip -n $NS route add default via 10.10.0.1 dev eth0
    mkdir -p $BPFFS
    mountpoint -q $BPFFS || mount -t bpf bpf $BPFFS
    ;;
  down)
    ip netns del $NS 2>/dev/null || true
    mountpoint -q $BPFFS && umount $BPFFS
    rmdir $BPFFS /run/cilium-spike 2>/dev/null || true
    ;;
  in_ns)
    shift
    exec ip netns exec $NS bash -c 'mount --bind '"$BPFFS"' /sys/fs/bpf && exec "$@"' in_ns "$@"
    ;;
  *) echo "usage: $0 up|down|in_ns <command...>" >&2; exit 2 ;;
esac
