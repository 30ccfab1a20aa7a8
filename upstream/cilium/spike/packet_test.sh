#!/usr/bin/env bash
# The spike's packet test (docs/cilium-feasibility.md), once the control plane, the operator
# and the agent run in the cilium-spike namespace and the tenancy controller's policy is
# applied to tenant-acme: pods a, b (tenant-acme) and c (tenant-other) exist in the API (Pending,
# nodeName cilium-spike-node); each gets a network namespace, joined by cilium-cni as
# containerd would (CNI ADD), and an HTTP server on 8080; then who reaches whom.
#   packet_test.sh <bin folder> <kubeconfig>      packet_test.sh clean <bin folder>
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PODS=(tenant-acme/a tenant-acme/b tenant-other/c)
in_ns() { "$here/netns.sh" in_ns "$@"; }
cni() {  # cni ADD|DEL <namespace> <name>
  echo '{"cniVersion":"0.3.1","name":"cilium","type":"cilium-cni"}' | in_ns env CNI_COMMAND="$1" \
    CNI_CONTAINERID="spike$3" CNI_NETNS="/run/netns/spike-pod-$3" CNI_IFNAME=eth0 CNI_PATH="$B" \
    "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=$2;K8S_POD_NAME=$3;K8S_POD_INFRA_CONTAINER_ID=spike$3" "$B/cilium-cni"
}
if [ "${1:-}" = clean ]; then
  B=$2
  for p in "${PODS[@]}"; do ns=${p%/*} n=${p#*/}
    [ -e "/tmp/cilium-spike/http-$n.pid" ] && kill "$(cat "/tmp/cilium-spike/http-$n.pid")" 2>/dev/null
    cni DEL "$ns" "$n" >/dev/null
    ip netns del "spike-pod-$n" 2>/dev/null
  done; exit 0
fi
mkdir -p /tmp/cilium-spike
B=$1 K=$2
declare -A ip
for p in "${PODS[@]}"; do ns=${p%/*} n=${p#*/}
  in_ns "$B/kubectl" --kubeconfig "$K" create namespace "$ns" 2>/dev/null
  echo "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$n\",\"namespace\":\"$ns\",\"labels\":{\"app\":\"$n\"}},\"spec\":{\"nodeName\":\"cilium-spike-node\",\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}" \
    | in_ns "$B/kubectl" --kubeconfig "$K" apply -f - >/dev/null
  ip netns add "spike-pod-$n"; ip -n "spike-pod-$n" link set lo up
  out=$(cni ADD "$ns" "$n")
  ip[$n]=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ips"][0]["address"].split("/")[0])')
  (ip netns exec "spike-pod-$n" python3 -m http.server 8080 >/dev/null 2>&1 & echo $! >"/tmp/cilium-spike/http-$n.pid")
done
sleep 2
probe() {  # probe <from pod> <address> <label>
  local code; code=$(ip netns exec "spike-pod-$1" curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://$2:8080/")
  local ping; ping=$(ip netns exec "spike-pod-$1" busybox ping -c1 -W2 "$2" >/dev/null 2>&1 && echo ok || echo dropped)
  echo "$3: http=$code ping=$ping"
}
probe a "${ip[b]}" "a (acme) -> b (acme)"
probe b "${ip[a]}" "b (acme) -> a (acme)"
probe a "${ip[c]}" "a (acme) -> c (other)"
probe c "${ip[a]}" "c (other) -> a (acme)"
probe c "${ip[b]}" "c (other) -> b (acme)"
probe a 10.10.0.2 "a (acme) -> node"
probe c 10.10.0.2 "c (other) -> node"
echo "a (acme) -> 169.254.169.254: http=$(ip netns exec spike-pod-a curl -s -o /dev/null -w '%{http_code}' --max-time 3 http://169.254.169.254/)"
in_ns "$B/cilium-dbg" bpf metrics list | grep -E 'REASON|denied'
