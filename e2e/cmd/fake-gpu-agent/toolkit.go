package main

import (
	"fmt"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
)

// writeToolkitSpec plays the NVIDIA Container Toolkit's part on a CDI node: it writes the
// spec `nvidia-ctk cdi generate` writes for the fake machine (kind nvidia.com/gpu, each
// card under its index and its UUID, with its /dev/nvidia<index> node; the control
// device nodes common to all), so that the harness's runtime can resolve the card
// names the agent hands over in cdi mode.
func writeToolkitSpec(dir string, lib nvml.Interface) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %v", ret)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("device count: %v", ret)
	}
	s := &specs.Spec{Version: cdi.Version, Kind: "nvidia.com/gpu", ContainerEdits: specs.ContainerEdits{
		DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidia-uvm-tools"}}}}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d: %v", i, ret)
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d UUID: %v", i, ret)
		}
		edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(i)}}}
		s.Devices = append(s.Devices, specs.Device{Name: strconv.Itoa(i), ContainerEdits: edits}, specs.Device{Name: uuid, ContainerEdits: edits})
	}
	_, err := cdi.Write(dir, s)
	return err
}
