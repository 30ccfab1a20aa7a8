//go:build tools

// Package tools pins Kueue, the batch admission controller that queues the API's containers by
// quota (docs/queues.md), built by upstream/build.sh.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
