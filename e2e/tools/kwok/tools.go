//go:build tools

// Package kwok pins kwok (sigs.k8s.io/kwok v0.8.0), the node and pod simulator `make scale`
// runs for its thousand GPU nodes. It is a module of its own: kwok is built against
// Kubernetes 1.36's client libraries and needs Go 1.26, neither of which the product or
// the e2e module should take on.
package kwok

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
