package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tessera-gpu/tessera/deviceplugin/cdi"
)

// Driver is what the fake toolkit hands a container of a real-runtime node besides the
// cards' device nodes, as NVIDIA's toolkit mounts the real driver: vgpu-core's stub
// driver (libcuda.so.1, libnvidia-ml.so.1 in HostDir) mounted into LibDir, and one file
// per card that the stub reads as that card (TESSERA_STUB_DEVICE_DIR), so the stub in a
// container sees exactly the cards the container was given, with their UUIDs and memory.
type Driver struct {
	HostDir string // holds libcuda.so.1 and libnvidia-ml.so.1; cards/ is written here
	LibDir  string // where the image's loader looks for libraries, e.g. /usr/lib/x86_64-linux-gnu
}

// stubCardDir is where a container finds its card files.
const stubCardDir = "/run/nvidia-stub/cards"

// writeToolkitSpec plays the NVIDIA Container Toolkit's part on a CDI node: it writes the
// spec `nvidia-ctk cdi generate` writes for the fake machine (kind nvidia.com/gpu, each
// card under its index and its UUID, with its /dev/nvidia<index> node; the control
// device nodes common to all), so that the harness's runtime can resolve the card
// names the agent hands over in cdi mode. With a driver (real-runtime nodes) the device
// nodes stand on the host's /dev/null, which exists, and the driver and card files are
// mounted as above.
func writeToolkitSpec(dir string, lib nvml.Interface, drv *Driver) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml init: %v", ret)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("device count: %v", ret)
	}
	node := func(path string) *specs.DeviceNode {
		if drv == nil {
			return &specs.DeviceNode{Path: path}
		}
		return &specs.DeviceNode{Path: path, HostPath: "/dev/null"}
	}
	s := &specs.Spec{Version: cdi.Version, Kind: "nvidia.com/gpu", ContainerEdits: specs.ContainerEdits{
		DeviceNodes: []*specs.DeviceNode{node("/dev/nvidiactl"), node("/dev/nvidia-uvm"), node("/dev/nvidia-uvm-tools")}}}
	if drv != nil {
		if err := os.MkdirAll(filepath.Join(drv.HostDir, "cards"), 0o755); err != nil {
			return err
		}
		s.ContainerEdits.Env = []string{"TESSERA_STUB_DEVICE_DIR=" + stubCardDir}
		for _, so := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
			s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{HostPath: filepath.Join(drv.HostDir, so),
				ContainerPath: filepath.Join(drv.LibDir, so), Options: []string{"ro", "nosuid", "nodev", "bind"}})
		}
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d: %v", i, ret)
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("device %d UUID: %v", i, ret)
		}
		edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node("/dev/nvidia" + strconv.Itoa(i))}}
		if drv != nil {
			card, err := writeStubCard(drv.HostDir, i, uuid, d)
			if err != nil {
				return err
			}
			edits.Mounts = []*specs.Mount{{HostPath: card, ContainerPath: filepath.Join(stubCardDir, strconv.Itoa(i)),
				Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}}}
		}
		s.Devices = append(s.Devices, specs.Device{Name: strconv.Itoa(i), ContainerEdits: edits}, specs.Device{Name: uuid, ContainerEdits: edits})
		migs, err := migDevices(d, i, uuid, node, drv)
		if err != nil {
			return err
		}
		s.Devices = append(s.Devices, migs...)
	}
	_, err := cdi.Write(dir, s)
	return err
}

// migDevices lists a card's MIG devices as the toolkit names them: "<card>:<MIG index>"
// and the MIG device's own UUID (both of its default naming strategies), each with the
// card's device node. The real toolkit also adds the instance's capability nodes under
// /dev/nvidia-caps, which no harness runtime needs. With a driver, each MIG device is a
// stub card file of its own ("MIG-<uuid> MEMORY_MIB SMS GPU-<parent>"), so a container
// given it sees one CUDA device of the instance's size. A card not in MIG mode has none.
func migDevices(d nvml.Device, i int, parent string, node func(string) *specs.DeviceNode, drv *Driver) ([]specs.Device, error) {
	if mode, _, ret := d.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("device %d MIG device count: %v", i, ret)
	}
	var out []specs.Device
	for j := 0; j < n; j++ {
		md, ret := d.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d MIG device %d: %v", i, j, ret)
		}
		uuid, ret := md.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d MIG device %d UUID: %v", i, j, ret)
		}
		edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node("/dev/nvidia" + strconv.Itoa(i))}}
		if drv != nil {
			name := fmt.Sprintf("%d-mig-%d", i, j)
			card, err := writeStubMIG(drv.HostDir, name, uuid, parent, md)
			if err != nil {
				return nil, err
			}
			// Named by its card's index: a container gets one device per card.
			edits.Mounts = []*specs.Mount{{HostPath: card, ContainerPath: filepath.Join(stubCardDir, strconv.Itoa(i)),
				Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}}}
		}
		out = append(out, specs.Device{Name: fmt.Sprintf("%d:%d", i, j), ContainerEdits: edits}, specs.Device{Name: uuid, ContainerEdits: edits})
	}
	return out, nil
}

// writeStubMIG writes the stub driver's file for a MIG device: its UUID, memory in MiB,
// SM count and parent card's UUID.
func writeStubMIG(hostDir, name, uuid, parent string, md nvml.Device) (string, error) {
	mem, ret := md.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("MIG device %s memory: %v", uuid, ret)
	}
	attrs, ret := md.GetAttributes()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("MIG device %s attributes: %v", uuid, ret)
	}
	path := filepath.Join(hostDir, "cards", name)
	if err := os.WriteFile(path, fmt.Appendf(nil, "%s %d %d %s\n", uuid, mem.Total>>20, attrs.MultiprocessorCount, parent), 0o644); err != nil {
		return "", fmt.Errorf("stub MIG device %s: %w", uuid, err)
	}
	return path, nil
}

// writeStubCard writes the stub driver's file for card i: its UUID and memory in MiB.
func writeStubCard(hostDir string, i int, uuid string, d nvml.Device) (string, error) {
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("device %d memory: %v", i, ret)
	}
	path := filepath.Join(hostDir, "cards", strconv.Itoa(i))
	if err := os.WriteFile(path, fmt.Appendf(nil, "%s %d\n", uuid, mem.Total>>20), 0o644); err != nil {
		return "", fmt.Errorf("stub card %d: %w", i, err)
	}
	return path, nil
}
