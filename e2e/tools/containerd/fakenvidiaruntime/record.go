package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// Record is what runc is given for one container, in the JSON shape of the in-memory
// runtime's records (e2e/tools/kubelet/fakecri and e2e/internal/workload.CRIRecord), with
// Runtime set. CDI device names are not in an OCI spec: their edits are.
type Record struct {
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	UID         string            `json:"uid"`
	Container   string            `json:"container"`
	ID          string            `json:"id"`
	Node        string            `json:"node"`
	Runtime     string            `json:"runtime"`
	Command     []string          `json:"command,omitempty"`
	Env         map[string]string `json:"env"`
	Mounts      []Mount           `json:"mounts"`
	Devices     []Device          `json:"devices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	LimitsFile  map[string]string `json:"limitsFile,omitempty"`
	CreatedAt   time.Time         `json:"createdAt"`
}

// Mount is one bind mount of the container.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
}

// Device is one device node of the container; an OCI spec names no host path, so HostPath
// holds its type and numbers ("c 1:3").
type Device struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
}

// The annotations containerd's CRI puts on every container's spec.
const (
	annotationType      = "io.kubernetes.cri.container-type"
	annotationName      = "io.kubernetes.cri.container-name"
	annotationPod       = "io.kubernetes.cri.sandbox-name"
	annotationNamespace = "io.kubernetes.cri.sandbox-namespace"
	annotationUID       = "io.kubernetes.cri.sandbox-uid"
	limitsFileEnv       = "TESSERA_LIMITS_FILE"
	runtimeName         = "containerd+runc"
)

func newRecord(id, node string, s *oci.Spec) *Record {
	a := s.Annotations
	r := &Record{Namespace: a[annotationNamespace], Pod: a[annotationPod], UID: a[annotationUID], Container: a[annotationName],
		ID: id, Node: node, Runtime: runtimeName, Env: map[string]string{}, Annotations: map[string]string{}, CreatedAt: time.Now()}
	for k, v := range a {
		if !strings.HasPrefix(k, "io.kubernetes.cri.") {
			r.Annotations[k] = v // what the kubelet passed (containerd forwards the allowed ones)
		}
	}
	if s.Process != nil {
		r.Command = s.Process.Args
		for _, kv := range s.Process.Env {
			k, v, _ := strings.Cut(kv, "=")
			r.Env[k] = v
		}
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
			r.Mounts = append(r.Mounts, Mount{ContainerPath: m.Destination, HostPath: m.Source, ReadOnly: slices.Contains(m.Options, "ro")})
		}
	}
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			r.Devices = append(r.Devices, Device{ContainerPath: d.Path, HostPath: fmt.Sprintf("%s %d:%d", d.Type, d.Major, d.Minor)})
		}
	}
	if p, ok := r.Env[limitsFileEnv]; ok {
		r.LimitsFile = readKeyValues(hostPath(p, r.Mounts))
	}
	return r
}

// write stores the record as <namespace>_<pod>_<uid>_<container>.json; a later attempt
// of the same container replaces it.
func (r *Record) write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(dir, fmt.Sprintf("%s_%s_%s_%s.json", r.Namespace, r.Pod, r.UID, r.Container))
	if err := os.WriteFile(name+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("record %s: %w", name, err)
	}
	return os.Rename(name+".tmp", name)
}

// hostPath maps a path inside the container to the host through its mounts (the most
// specific mount wins).
func hostPath(path string, mounts []Mount) string {
	best, out := -1, ""
	for _, m := range mounts {
		rel, err := filepath.Rel(m.ContainerPath, path)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if len(m.ContainerPath) > best {
			best, out = len(m.ContainerPath), filepath.Join(m.HostPath, rel)
		}
	}
	return out
}

func readKeyValues(path string) map[string]string {
	if path == "" {
		return map[string]string{"error": "no mount holds the limits file"}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			out[k] = v
		}
	}
	return out
}
