package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// BuildControlPlane is Build for a cluster with no simulated GPU nodes (make volcano-e2e
// runs kwok nodes): it rebuilds Tessera's vc-scheduler (incrementally) and reuses the cached
// etcd, kube-apiserver, kube-controller-manager and Volcano's controllers and webhook, so
// a program that needs none of the node side does not fail on it. The node side's fields
// of the result are empty. When a control-plane program is missing or its module changed
// it falls back to Build.
func BuildControlPlane(ctx context.Context, root, e2eDir, cacheDir string, progress io.Writer) (*Binaries, error) {
	kube := stamp{file: "kube.stamp", module: filepath.Join(e2eDir, "tools", "kube")}
	volcano := stamp{file: "volcano.stamp", module: e2eDir}
	for _, s := range []*stamp{&kube, &volcano} {
		if err := s.check(cacheDir); err != nil {
			return nil, err
		}
		if !s.fresh {
			return Build(ctx, root, e2eDir, cacheDir, progress)
		}
	}
	in := func(name string) string { return filepath.Join(cacheDir, name) }
	b := &Binaries{Etcd: in("etcd"), APIServer: in("kube-apiserver"), ControllerManager: in("kube-controller-manager"),
		VolcanoControllers: in("vc-controller-manager"), VolcanoWebhook: in("vc-webhook-manager"), Scheduler: in("vc-scheduler")}
	for _, p := range []string{b.Etcd, b.APIServer, b.ControllerManager, b.VolcanoControllers, b.VolcanoWebhook} {
		if _, err := os.Stat(p); err != nil {
			return Build(ctx, root, e2eDir, cacheDir, progress)
		}
	}
	fmt.Fprintf(progress, "  %-30s cached\n", "control plane and Volcano")
	if err := runWithProgress(ctx, progress, "vc-scheduler", "~3 min", root, nil, "go", "build", "-o", b.Scheduler, "./cmd/vc-scheduler"); err != nil {
		return nil, err
	}
	crds, err := volcanoCRDs(ctx, e2eDir)
	if err != nil {
		return nil, err
	}
	b.CRDs = crds
	return b, nil
}
