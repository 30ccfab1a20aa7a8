// Command kwok-stages prints the Stages kwok's own kustomize packages embed (fast node
// initialisation, heartbeat with a Lease, pod ready, pod delete), for `kwok --config`: the
// kwok binary runs no Stage unless it is given some.
package main

import (
	"fmt"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	for _, stage := range []string{nodefast.DefaultNodeInit, nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady, podfast.DefaultPodDelete} {
		fmt.Println("---")
		fmt.Print(stage)
	}
}
