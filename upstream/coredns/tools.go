//go:build tools

// Package tools pins CoreDNS, the sandbox's cluster DNS (its kubernetes plugin against the
// sandbox's kube-apiserver; docs/sandbox.md), built by upstream/build.sh.
package tools

import _ "github.com/coredns/coredns"
