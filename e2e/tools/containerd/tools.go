//go:build tools

// Package containerd pins the container runtime the e2e harness's real-runtime nodes run
// under their kubelets: containerd v2.2.9 (the daemon with its CRI plugin, the runc v2 shim
// and ctr, which imports the harness's images); runc itself is pinned in ../runc. It is a
// module of its own, apart from the e2e module (Volcano's replace block pins grpc to v1.64.0;
// containerd 2.2 wants v1.78) and from tools/kubelet (so that a runtime change does not
// rebuild the kubelet, and the reverse); it builds with the versions containerd chose.
// fakenvidiaruntime, the OCI runtime between containerd's shim and runc on those nodes,
// lives here for the CDI library containerd itself uses.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
