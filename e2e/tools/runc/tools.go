//go:build tools

// Package runc pins runc v1.5.3, the OCI runtime containerd's runc shim executes on a
// real-runtime e2e node. It is a module of its own so that runc builds with exactly the
// dependency versions it chose: in one module with containerd 2.2, runc's newer
// filepath-securejoin, cilium/ebpf, moby/sys and go-systemd would raise containerd's.
package runc

import (
	_ "github.com/opencontainers/runc"
)
