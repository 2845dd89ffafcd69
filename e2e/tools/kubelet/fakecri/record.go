package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Record is what the kubelet passed for one container in CreateContainer. The e2e module
// reads these files (e2e/internal/workload.CRIRecord has the same JSON shape).
type Record struct {
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	UID         string            `json:"uid"`
	Container   string            `json:"container"`
	Attempt     uint32            `json:"attempt"`
	ID          string            `json:"id"`
	Node        string            `json:"node"`
	Command     []string          `json:"command,omitempty"`
	Env         map[string]string `json:"env"`
	Mounts      []Mount           `json:"mounts"`
	Devices     []Device          `json:"devices,omitempty"`
	CDIDevices  []string          `json:"cdiDevices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// LimitsFile is the KEY=VALUE file named by TESSERA_LIMITS_FILE, read on the host
	// through the container's mounts when the container was created (the device plugin's
	// PreStartContainer has written it by then).
	LimitsFile map[string]string `json:"limitsFile,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// Mount is one bind mount of the container.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
}

// Device is one device node of the container.
type Device struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions"`
}

// The kubelet labels every container with its pod and name.
const (
	labelPodName      = "io.kubernetes.pod.name"
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodUID       = "io.kubernetes.pod.uid"
	labelContainer    = "io.kubernetes.container.name"
	limitsFileEnv     = "TESSERA_LIMITS_FILE"
)

func newRecord(id, node string, req *runtimeapi.CreateContainerRequest) *Record {
	c := req.GetConfig()
	l := c.GetLabels()
	r := &Record{Namespace: l[labelPodNamespace], Pod: l[labelPodName], UID: l[labelPodUID], Container: l[labelContainer],
		Attempt: c.GetMetadata().GetAttempt(), ID: id, Node: node, Command: append(append([]string{}, c.GetCommand()...), c.GetArgs()...),
		Env: map[string]string{}, Annotations: c.GetAnnotations(), CreatedAt: time.Now()}
	for _, kv := range c.GetEnvs() {
		r.Env[kv.GetKey()] = kv.GetValue()
	}
	for _, m := range c.GetMounts() {
		r.Mounts = append(r.Mounts, Mount{ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), ReadOnly: m.GetReadonly()})
	}
	for _, d := range c.GetDevices() {
		r.Devices = append(r.Devices, Device{ContainerPath: d.GetContainerPath(), HostPath: d.GetHostPath(), Permissions: d.GetPermissions()})
	}
	for _, d := range c.GetCDIDevices() {
		r.CDIDevices = append(r.CDIDevices, d.GetName())
	}
	return r
}

// readLimitsFile reads the file TESSERA_LIMITS_FILE names through the container's mounts,
// after the CDI edits (a DRA driver's spec brings both the variable and the mount).
func (r *Record) readLimitsFile() {
	if p, ok := r.Env[limitsFileEnv]; ok {
		r.LimitsFile = readKeyValues(hostPath(p, r.Mounts))
	}
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
		return err
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
