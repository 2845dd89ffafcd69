//go:build tools

// Package tools pins the helm program the end-to-end harness builds: Helm v3.19.0's own
// CLI (helm.sh/helm/v3/cmd/helm), which the upgrade scenario runs to install, upgrade
// and uninstall the chart against the e2e API server as a user would. It is a module of
// its own so that Helm's dependencies reach neither e2e/go.mod (Volcano's replace block)
// nor the product's go.mod; v3.19 is the Helm release built on Kubernetes 1.34's client
// libraries.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
