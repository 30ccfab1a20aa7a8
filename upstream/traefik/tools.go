//go:build tools

// Package tools pins the ingress controller the sandbox runs (Traefik), built by upstream/build.sh.
package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
