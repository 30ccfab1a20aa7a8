//go:build tools

// Package tools pins the network the sandbox's node may run (Cilium: agent, operator and the
// debug CLI), built by upstream/build.sh only when asked (GPUCAAS_CILIUM=1, make upstream-cilium).
package tools

import (
	_ "github.com/cilium/cilium/cilium-dbg"
	_ "github.com/cilium/cilium/daemon"
	_ "github.com/cilium/cilium/operator"
	_ "github.com/cilium/cilium/plugins/cilium-cni"
)
