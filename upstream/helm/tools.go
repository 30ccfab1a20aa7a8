//go:build tools

// Package tools pins Helm, which installs the chart the way a platform team does, built by
// upstream/build.sh.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
