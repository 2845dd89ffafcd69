package uninstall

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const resource = "volcano.sh/vgpu-number"

type lister struct {
	pods []*podresourcesv1.PodResources
	err  error
}

func (l lister) List(context.Context) ([]*podresourcesv1.PodResources, error) { return l.pods, l.err }

func pod(ns, name, res string, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesv1.ContainerResources{
		{Name: "side"},
		{Name: "main", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: res, DeviceIds: ids}}},
	}}
}

// host lays out what the chart's init container and the agent put on a node.
func host(t *testing.T) (Files, []string) {
	t.Helper()
	root := t.TempDir()
	f := Files{HookLibrary: filepath.Join(root, "usr/local/tessera/lib/libvgpu.so"), StateDir: filepath.Join(root, "var/lib/tessera"),
		CDISpec: filepath.Join(root, "var/run/cdi/tessera.io-vgpu.yaml")}
	paths := []string{f.HookLibrary, filepath.Join(f.StateDir, "ld.so.preload"), filepath.Join(f.StateDir, "pods", "uid_main", "limits"), f.CDISpec}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f, paths
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestHoldersAreThePodsWithSlotsOfTheResource(t *testing.T) {
	got := Holders([]*podresourcesv1.PodResources{
		pod("b", "train", resource, "GPU-1::3"),
		pod("a", "cuda-whole", "nvidia.com/gpu", "GPU-2"),
		pod("a", "infer", resource, "GPU-1::4", "GPU-2::0"),
		pod("a", "admitted-without-devices", resource),
		{Namespace: "a", Name: "cpu-only", Containers: []*podresourcesv1.ContainerResources{{Name: "c"}}},
	}, resource)
	if strings.Join(got, " ") != "a/infer b/train" {
		t.Errorf("holders %v, want a/infer b/train", got)
	}
}

func TestRemoveTakesTheFilesOnlyWhenNoPodHoldsASlot(t *testing.T) {
	for _, tt := range []struct {
		name    string
		kubelet lister
		removed bool
		err     error
		says    string
	}{
		{"no pod on the node: everything goes", lister{}, true, nil, ""},
		{"only pods of other resources: everything goes", lister{pods: []*podresourcesv1.PodResources{pod("a", "whole", "nvidia.com/gpu", "GPU-0")}}, true, nil, ""},
		{"a vGPU pod still runs: everything stays", lister{pods: []*podresourcesv1.PodResources{pod("ml", "train-0", resource, "GPU-0::1")}}, false, ErrInUse, "ml/train-0"},
		{"the kubelet cannot be asked: everything stays", lister{err: errors.New("connection refused")}, false, nil, "cannot ask the kubelet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, paths := host(t)
			err := Remove(context.Background(), tt.kubelet, resource, f)
			if tt.removed != (err == nil) || (tt.err != nil && !errors.Is(err, tt.err)) || (tt.says != "" && !strings.Contains(err.Error(), tt.says)) {
				t.Fatalf("Remove: %v; want removed %t, error %v naming %q", err, tt.removed, tt.err, tt.says)
			}
			for _, p := range paths {
				if exists(p) == tt.removed {
					t.Errorf("%s exists %t after Remove, want %t", p, exists(p), !tt.removed)
				}
			}
			if tt.removed && (exists(f.StateDir) || exists(filepath.Dir(f.HookLibrary))) {
				t.Errorf("the emptied directories %s, %s are left although nothing holds them", f.StateDir, filepath.Dir(f.HookLibrary))
			}
		})
	}
}

func TestRemoveKeepsTheHookDirectoryWhenItHoldsSomethingElse(t *testing.T) {
	f, _ := host(t)
	other := filepath.Join(filepath.Dir(f.HookLibrary), "someone-elses.so")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Remove(context.Background(), lister{}, resource, f); err != nil {
		t.Fatal(err)
	}
	if exists(f.HookLibrary) || !exists(other) {
		t.Errorf("library exists %t (want false), the other file exists %t (want true)", exists(f.HookLibrary), exists(other))
	}
}

func TestWatchSeesItsDaemonSetDeletedAndNoOther(t *testing.T) {
	ds := func(name string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu", Name: name}}
	}
	client := fake.NewSimpleClientset(ds("tessera-agent"), ds("other"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Watch{Client: client, Namespace: "gpu", Name: "tessera-agent"}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Gone(200 * time.Millisecond) {
		t.Fatal("gone while the DaemonSet exists (a restart or an upgrade would remove the files)")
	}
	if err := client.AppsV1().DaemonSets("gpu").Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if w.Gone(300 * time.Millisecond) {
		t.Fatal("gone when another DaemonSet was deleted")
	}
	if err := client.AppsV1().DaemonSets("gpu").Delete(ctx, "tessera-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !w.Gone(5 * time.Second) {
		t.Fatal("the DaemonSet's deletion was not seen")
	}
}

func TestWatchOfAMissingDaemonSetNeverSaysGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Watch{Client: fake.NewSimpleClientset(), Namespace: "gpu", Name: "tessera-agent"}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Gone(300 * time.Millisecond) {
		t.Error("gone for a DaemonSet that never existed: an agent started by hand would remove the files")
	}
}
