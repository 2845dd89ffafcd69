//go:build tools

// Package tools pins the control-plane programs the end-to-end harness builds:
// kube-apiserver from Kubernetes v1.30.2, vc-controller-manager and vc-webhook-manager
// (the admission webhook) from Volcano v1.10.0, the versions Tessera's scheduler is built
// against.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/webhook-manager"
)
