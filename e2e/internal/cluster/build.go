// Package cluster brings up a local Kubernetes control plane with Volcano, Tessera's
// scheduler and simulated GPU nodes, all on 127.0.0.1, for the end-to-end scenarios and
// `make demo`. Every program runs as a child process logging into one run directory;
// Stop (or the harness process dying) ends them all.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Binaries are the programs a cluster runs.
type Binaries struct {
	Etcd, APIServer, ControllerManager, VolcanoControllers, VolcanoWebhook, Scheduler, Agent string
	// Admission is Tessera's own admission webhook (started by the scenarios that use it).
	Admission string
	// Kubelet is the real kubelet; CRI our in-memory runtime for it; KubeletNS the
	// launcher that gives each kubelet its own mount namespace.
	Kubelet, CRI, KubeletNS string
	// Helm is Helm's own CLI, for the upgrade scenario.
	Helm string
	// Kubectl is Kubernetes' kubectl and KubectlTessera Tessera's CLI under its plugin
	// name, for the walk through the docs' commands.
	Kubectl, KubectlTessera string
	// Runtime is what real-runtime nodes run (runtimebuild.go); its Missing says why there
	// is none.
	Runtime RuntimeBinaries
	// CRDs are Volcano's CRD files, from the volcano.sh/volcano module.
	CRDs []string
}

// kubeLDFlags make the API server report its version; clients cannot parse it otherwise.
const kubeLDFlags = "-X k8s.io/component-base/version.gitVersion=v1.34.2 " +
	"-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"

// Build builds what is missing into cacheDir and returns the paths. Kubernetes' and
// Volcano's programs are built once and reused while present and built from the same
// module (a stamp per module holds the hash of its go.sum, so a version change rebuilds
// that module's programs only); Tessera's programs are rebuilt every time
// (incrementally) so the run tests this tree.
// root is the repository root (the product module), e2eDir the e2e module (Volcano's
// programs); etcd, kube-apiserver and kube-controller-manager build in its tools/kube
// module, the kubelet and our in-memory CRI in tools/kubelet, helm in tools/helm, kubectl in
// tools/kubectl.
func Build(ctx context.Context, root, e2eDir, cacheDir string, progress io.Writer) (*Binaries, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, err
	}
	b := &Binaries{}
	kubeDir := filepath.Join(e2eDir, "tools", "kube")
	kubeletDir := filepath.Join(e2eDir, "tools", "kubelet")
	helmDir := filepath.Join(e2eDir, "tools", "helm")
	kubectlDir := filepath.Join(e2eDir, "tools", "kubectl")
	kube, volcano, kubelet := stamp{file: "kube.stamp", module: kubeDir},
		stamp{file: "volcano.stamp", module: e2eDir}, stamp{file: "kubelet.stamp", module: kubeletDir}
	helm, kubectl := stamp{file: "helm.stamp", module: helmDir}, stamp{file: "kubectl.stamp", module: kubectlDir}
	containerdDir, runcDir := filepath.Join(e2eDir, "tools", "containerd"), filepath.Join(e2eDir, "tools", "runc")
	containerd, runc := stamp{file: "containerd.stamp", module: containerdDir}, stamp{file: "runc.stamp", module: runcDir}
	stamps := []*stamp{&kube, &volcano, &kubelet, &helm, &kubectl, &containerd, &runc}
	for _, s := range stamps {
		if err := s.check(cacheDir); err != nil {
			return nil, err
		}
	}
	seccomp := haveSeccomp(ctx)
	if !seccomp {
		b.Runtime.Missing = "libseccomp's headers are missing (apt-get install libseccomp-dev pkg-config): runc needs " +
			"them for the RuntimeDefault seccomp profile the kubelet asks for on every pod"
	}
	rt := &b.Runtime
	steps := []struct {
		name, dir, pkg, ldflags, cold string
		cached                        *stamp // nil: rebuilt every run
		out                           *string
		tags                          string
		env                           []string // e.g. CGO_ENABLED=0
		skip                          bool
	}{
		// Kubernetes 1.34's etcd client needs etcd 3.5 or later; Debian bookworm ships 3.4.
		{"etcd", kubeDir, "go.etcd.io/etcd/server/v3", "", "~1 min", &kube, &b.Etcd, "", nil, false},
		{"kube-apiserver", kubeDir, "k8s.io/kubernetes/cmd/kube-apiserver", kubeLDFlags, "~4 min", &kube, &b.APIServer, "", nil, false},
		{"kube-controller-manager", kubeDir, "k8s.io/kubernetes/cmd/kube-controller-manager", kubeLDFlags, "~2 min", &kube, &b.ControllerManager, "", nil, false},
		{"vc-controller-manager", e2eDir, "volcano.sh/volcano/cmd/controller-manager", "", "~2 min", &volcano, &b.VolcanoControllers, "", nil, false},
		{"vc-webhook-manager", e2eDir, "volcano.sh/volcano/cmd/webhook-manager", "", "~1 min", &volcano, &b.VolcanoWebhook, "", nil, false},
		{"kubelet", kubeletDir, "k8s.io/kubernetes/cmd/kubelet", kubeLDFlags, "~4 min", &kubelet, &b.Kubelet, "", nil, false},
		{"helm", helmDir, "helm.sh/helm/v3/cmd/helm", "", "~3 min", &helm, &b.Helm, "", nil, false},
		{"kubectl", kubectlDir, ".", kubeLDFlags, "~2 min", &kubectl, &b.Kubectl, "", nil, false},
		{"vc-scheduler", root, "./cmd/vc-scheduler", "", "~3 min", nil, &b.Scheduler, "", nil, false},
		{"tessera-admission", root, "./cmd/tessera-admission", "", "~1 min", nil, &b.Admission, "", nil, false},
		{"kubectl-tessera", root, "./cmd/tessera", "", "~1 min", nil, &b.KubectlTessera, "", nil, false},
		{"fake-gpu-agent", e2eDir, "./cmd/fake-gpu-agent", "", "~1 min", nil, &b.Agent, "", nil, false},
		{"fakecri", kubeletDir, "./fakecri", "", "~1 min", nil, &b.CRI, "", nil, false},
		{"kubelet-ns", e2eDir, "./cmd/kubelet-ns", "", "~10 s", nil, &b.KubeletNS, "", nil, false},
		// The real-runtime nodes' runtime: containerd v2.2 and runc v1.5, each with the
		// dependency versions its own release chose (tools/containerd, tools/runc).
		{"containerd", containerdDir, "github.com/containerd/containerd/v2/cmd/containerd", "", "~2.5 min", &containerd,
			&rt.Containerd, "no_btrfs no_devmapper no_zfs urfave_cli_no_docs", nil, !seccomp},
		{"containerd-shim-runc-v2", containerdDir, "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2", "",
			"~10 s", &containerd, &rt.Shim, "no_grpc urfave_cli_no_docs", []string{"CGO_ENABLED=0"}, !seccomp},
		{"ctr", containerdDir, "github.com/containerd/containerd/v2/cmd/ctr", "", "~10 s", &containerd, &rt.Ctr,
			"urfave_cli_no_docs", nil, !seccomp},
		{"runc", runcDir, "github.com/opencontainers/runc", "", "~1 min", &runc, &rt.Runc, "seccomp urfave_cli_no_docs",
			[]string{"CGO_ENABLED=1"}, !seccomp},
		{"fakenvidiaruntime", containerdDir, "./fakenvidiaruntime", "", "~10 s", nil, &rt.NvidiaRuntime, "", nil, !seccomp},
		{"pause", e2eDir, "./cmd/pause", "", "~5 s", nil, &rt.Pause, "", []string{"CGO_ENABLED=0"}, !seccomp},
	}
	missing := 0
	for _, s := range steps {
		if s.cached == nil || s.skip {
			continue // ours: rebuilt (incrementally) every run
		}
		if _, err := os.Stat(filepath.Join(cacheDir, s.name)); err != nil || !s.cached.fresh {
			missing++
		}
	}
	if missing > 0 {
		fmt.Fprintf(progress, "  %d of Kubernetes', Volcano's, Helm's, kubectl's, containerd's and runc's programs to build from "+
			"source into %s: the first build takes ~15 min on 2 cores (kube-apiserver and the kubelet ~4 min each); "+
			"later runs reuse them\n", missing, cacheDir)
	}
	for i, s := range steps {
		name := fmt.Sprintf("[%d/%d] %s", i+1, len(steps), s.name)
		if s.skip {
			fmt.Fprintf(progress, "  %-30s skipped: %s\n", name, b.Runtime.Missing)
			continue
		}
		*s.out = filepath.Join(cacheDir, s.name)
		if _, err := os.Stat(*s.out); err == nil && s.cached != nil && s.cached.fresh {
			fmt.Fprintf(progress, "  %-30s cached\n", name)
			continue
		}
		args := []string{"build", "-o", *s.out}
		if s.ldflags != "" {
			args = append(args, "-ldflags", s.ldflags)
		}
		if s.tags != "" {
			args = append(args, "-tags", s.tags)
		}
		args = append(args, s.pkg)
		if err := runWithProgress(ctx, progress, name, s.cold, s.dir, s.env, "go", args...); err != nil {
			return nil, err
		}
	}
	if seccomp {
		if err := buildWorkload(ctx, root, cacheDir, progress, rt); err != nil {
			return nil, err
		}
	}
	for _, s := range stamps {
		if !seccomp && (s == &containerd || s == &runc) {
			continue // not built: not fresh
		}
		if err := os.WriteFile(filepath.Join(cacheDir, s.file), []byte(s.hash), 0o644); err != nil {
			return nil, err
		}
	}
	crds, err := volcanoCRDs(ctx, e2eDir)
	if err != nil {
		return nil, err
	}
	b.CRDs = crds
	return b, nil
}

// stamp is the cached binaries of one module: the hash of its go.sum, and whether the
// cache was built from it.
type stamp struct {
	file, module string
	hash         string
	fresh        bool
}

func (s *stamp) check(cacheDir string) error {
	sum, err := os.ReadFile(filepath.Join(s.module, "go.sum"))
	if err != nil {
		return err
	}
	h := sha256.Sum256(sum)
	s.hash = hex.EncodeToString(h[:])
	old, err := os.ReadFile(filepath.Join(cacheDir, s.file))
	s.fresh = err == nil && string(old) == s.hash
	return nil
}

func moduleDir(ctx context.Context, dir, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// runWithProgress runs a build and prints its elapsed time every 20 seconds.
func runWithProgress(ctx context.Context, w io.Writer, name, cold, dir string, env []string, prog string, args ...string) error {
	start := time.Now()
	fmt.Fprintf(w, "  %-30s building (cold build %s)\n", name, cold)
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("build %s: %w\n%s", name, err, out.String())
			}
			fmt.Fprintf(w, "  %-30s built in %s\n", name, time.Since(start).Round(time.Second))
			return nil
		case <-tick.C:
			fmt.Fprintf(w, "  %-30s still building (%s)\n", name, time.Since(start).Round(time.Second))
		}
	}
}

// volcanoCRDs are the CRD files of Volcano's module (its volcano and jobflow groups).
func volcanoCRDs(ctx context.Context, e2eDir string) ([]string, error) {
	dir, err := moduleDir(ctx, e2eDir, "volcano.sh/volcano")
	if err != nil {
		return nil, err
	}
	var crds []string
	for _, group := range []string{"volcano", "jobflow"} {
		files, _ := filepath.Glob(filepath.Join(dir, "config", "crd", group, "bases", "*.yaml"))
		crds = append(crds, files...)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRDs under %s/config/crd", dir)
	}
	return crds, nil
}
