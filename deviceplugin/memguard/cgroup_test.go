package memguard

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

const podA = types.UID("0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b")

func TestPodUIDFromCgroup(t *testing.T) {
	cases := []struct {
		name, content string
		want          types.UID
	}{
		{"systemd burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1d2c3b_4a59_4687_9a0b_1c2d3e4f5a6b.slice/cri-containerd-abc.scope\n", podA},
		{"systemd best-effort", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f1d2c3b_4a59_4687_9a0b_1c2d3e4f5a6b.slice/cri-containerd-abc.scope", podA},
		{"systemd guaranteed", "0::/kubepods.slice/kubepods-pod0f1d2c3b_4a59_4687_9a0b_1c2d3e4f5a6b.slice/crio-abc.scope", podA},
		{"cgroupfs", "0::/kubepods/burstable/pod0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b/4be1d0c2f3", podA},
		{"cgroupfs guaranteed", "0::/kubepods/pod0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b/4be1d0c2f3", podA},
		{"nested kubelet (kind)", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod0f1d2c3b_4a59_4687_9a0b_1c2d3e4f5a6b.slice/cri-containerd-x.scope", podA},
		{"cgroup v1, several hierarchies", "12:pids:/kubepods/besteffort/pod0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b/c1\n11:memory:/kubepods/besteffort/pod0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b/c1\n0::/\n", podA},
		{"host process", "0::/system.slice/containerd.service\n", ""},
		{"a pod-like name outside kubepods", "0::/user.slice/pod0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b/x", ""},
		{"upper-case UID", "0::/kubepods/besteffort/pod0F1D2C3B-4A59-4687-9A0B-1C2D3E4F5A6B/c", ""},
		{"short UID", "0::/kubepods/besteffort/pod0f1d2c3b-4a59-4687-9a0b/c", ""},
		{"no path", "0::\n", ""},
		{"garbage", "\x00\xff::::", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := PodUIDFromCgroup([]byte(c.content))
			if got != c.want || ok != (c.want != "") {
				t.Fatalf("PodUIDFromCgroup(%q) = %q, %v; want %q", c.content, got, ok, c.want)
			}
		})
	}
}

// FuzzPodUIDFromCgroup: any content gives either nothing or a well-formed pod UID, and
// never panics.
func FuzzPodUIDFromCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1d2c3b_4a59_4687_9a0b_1c2d3e4f5a6b.slice/x"))
	f.Add([]byte("0::/kubepods/pod0f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b/c\n1:cpu:/"))
	f.Fuzz(func(t *testing.T, b []byte) {
		uid, ok := PodUIDFromCgroup(b)
		if ok != (uid != "") {
			t.Fatalf("ok %v with uid %q", ok, uid)
		}
		if ok && !isUID(string(uid)) {
			t.Fatalf("malformed uid %q", uid)
		}
	})
}
