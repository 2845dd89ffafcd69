package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// CRIRecord is what a node's kubelet passed to one container in CreateContainer, as the
// in-memory CRI (e2e/tools/kubelet/fakecri, type Record) writes it; on a real-runtime node,
// what runc was given, after the CRI's CDI injection (e2e/tools/containerd/fakenvidiaruntime
// writes it, with Runtime set and no CDI device names: an OCI spec holds their edits).
type CRIRecord struct {
	Runtime     string            `json:"runtime,omitempty"`
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
	// LimitsFile is the Tessera limits file, read through the container's mounts when
	// the container was created.
	LimitsFile map[string]string `json:"limitsFile,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// Mount is one bind mount of a container.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
}

// Device is one device node of a container.
type Device struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions"`
}

// Handed is what the nodes handed to containers: the CRI records and the kubelets'
// device slots, both by pod UID/container, and the hook library every agent mounts.
type Handed struct {
	Records     map[string]CRIRecord
	Slots       map[string][]string
	HookLibrary string
}

// ReadHanded reads the CRI records under the nodes' record directories and the slots of
// the resource in the nodes' device manager checkpoints.
func ReadHanded(recordDirs, checkpoints []string, resource, hookLibrary string) (*Handed, error) {
	h := &Handed{Records: map[string]CRIRecord{}, Slots: map[string][]string{}, HookLibrary: hookLibrary}
	for _, dir := range recordDirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			var r CRIRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			h.Records[r.UID+"/"+r.Container] = r
		}
	}
	for _, f := range checkpoints {
		if err := readCheckpoint(f, resource, h.Slots); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// deviceCheckpoint is the part of the kubelet device manager's checkpoint file
// (pkg/kubelet/cm/devicemanager/checkpoint) read here: slot IDs per NUMA node.
type deviceCheckpoint struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID, ContainerName, ResourceName string
			DeviceIDs                           map[string][]string
		}
	}
}

func readCheckpoint(file, resource string, out map[string][]string) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the kubelet writes it at its first allocation
	}
	if err != nil {
		return err
	}
	var cp deviceCheckpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, e := range cp.Data.PodDeviceEntries {
		if e.ResourceName != resource {
			continue
		}
		key := e.PodUID + "/" + e.ContainerName
		for _, ids := range e.DeviceIDs {
			out[key] = append(out[key], ids...)
		}
	}
	return nil
}
