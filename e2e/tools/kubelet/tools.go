//go:build tools

// Package kubelet pins the kubelet v1.34.2 that runs every simulated GPU node of the
// end-to-end harness, and the CRI fakes our in-memory runtime (fakecri/) wraps. It is a
// module of its own, apart from both the e2e module (Volcano's replace block pins grpc
// and runc versions the kubelet does not build with) and tools/kube (so that a kubelet
// change does not rebuild the API server, and the reverse); it builds with the versions
// Kubernetes itself chose.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
