//go:build tools

// Package kube pins the Kubernetes control plane the end-to-end harness builds:
// kube-apiserver and kube-controller-manager v1.34.2 and the etcd server they depend on
// (v3.6). It is a module of its
// own because Volcano's replace block (in the e2e module) pins google.golang.org/grpc to
// v1.64.0, with which Kubernetes 1.34's etcd client cannot reach etcd (the API server
// exits with "Error creating leases: error creating storage factory: context deadline
// exceeded"); here they build with the versions Kubernetes itself chose.
package kube

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
