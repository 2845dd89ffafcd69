//go:build tools

// Package tools pins the Volcano programs the end-to-end harness builds:
// vc-controller-manager and vc-webhook-manager (the admission webhook) from Volcano
// v1.14.1, the version Tessera's scheduler is built against. etcd and kube-apiserver
// come from the tools/kube module (see there why it is separate).
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/webhook-manager"
)
