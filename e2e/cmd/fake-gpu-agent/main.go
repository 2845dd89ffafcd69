// Command fake-gpu-agent is Tessera's node agent (deviceplugin/agent, unchanged) on a
// go-nvml fake machine instead of the NVIDIA driver. It exists only for the end-to-end
// harness, so the product binary cmd/vgpu-device-plugin carries no fakes.
//
// Usage: fake-gpu-agent --machine=SHAPE [--driver-uuids] [--fault-dir=DIR] [--toolkit-cdi-dir=DIR]
// [--toolkit-driver-dir=DIR --toolkit-lib-dir=DIR] [--metrics-auth=kubernetes|none] [vgpu-device-plugin flags...]
//
// Shapes: dgxa100 (8x A100-SXM4-40GB, NVSwitch, 2 NUMA nodes), a30x4 (4x A30 on 2 NUMA
// nodes, NVLink pairs), l40sxN (N x L40S), h100migx2 (2x H100 80GB in MIG mode, their
// instances created at start: see h100MIG). Card UUIDs are derived from the node name so
// that they are unique across nodes and stable across restarts of the agent: GPU-<node>-<index>,
// or with --driver-uuids in the driver's own form (driverUUID), which vgpu-core parses. With
// --fault-dir, a file xid-<index> holding an XID number makes that card report the XID
// (a30x4 and l40sxN machines; see watchFaults), and a file processes-<index> lists the
// card's processes. With --toolkit-cdi-dir, it first writes
// the CDI spec the NVIDIA Container Toolkit would write for the machine (toolkit.go); with
// --toolkit-driver-dir too, that spec also mounts vgpu-core's stub driver from that directory
// into --toolkit-lib-dir, and each card as a file the stub reads (a real-runtime node).
package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/agent"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func main() {
	own, args := splitOwnFlags(os.Args[1:])
	shape := own["machine"]
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cfg, err := config.Load(args, os.LookupEnv, klogFlags)
	if err != nil {
		klog.ErrorS(err, "Bad configuration")
		os.Exit(2)
	}
	machine, err := NewMachine(shape, cfg.NodeName, own["driver-uuids"] == "true")
	if err != nil {
		klog.ErrorS(err, "Bad machine")
		os.Exit(2)
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Cannot build the Kubernetes client configuration")
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		klog.ErrorS(err, "Cannot create the Kubernetes client")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if dir := own["toolkit-cdi-dir"]; dir != "" {
		var drv *Driver
		if own["toolkit-driver-dir"] != "" {
			drv = &Driver{HostDir: own["toolkit-driver-dir"], LibDir: own["toolkit-lib-dir"]}
		}
		if err := writeToolkitSpec(dir, machine, drv); err != nil {
			klog.ErrorS(err, "Cannot write the toolkit's CDI spec", "dir", dir)
			os.Exit(1)
		}
	}
	if dir := own["fault-dir"]; dir != "" {
		fm, ok := machine.(*nvmlfake.Machine)
		if !ok {
			klog.ErrorS(nil, "Fault injection needs an a30x4 or l40sxN machine", "shape", shape)
			os.Exit(2)
		}
		go watchFaults(ctx, dir, fm)
	}
	deps := agent.Deps{NVML: machine, Client: client, SysfsRoot: os.TempDir()}
	switch own["metrics-auth"] {
	case "kubernetes":
		if cfg.MetricsAddress != "" {
			deps.MetricsListener = agent.GuardMetrics(ctx, cfg.MetricsAddress, client)
		}
	case "none":
	default:
		klog.ErrorS(nil, "Bad --metrics-auth, want kubernetes or none", "value", own["metrics-auth"])
		os.Exit(2)
	}
	klog.InfoS("Fake GPU machine", "shape", shape, "node", cfg.NodeName)
	if err := agent.Run(ctx, cfg, deps); err != nil {
		klog.ErrorS(err, "Node agent stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// splitOwnFlags removes this program's own flags (--machine, default dgxa100, and
// --driver-uuids, --fault-dir, --toolkit-cdi-dir, --toolkit-driver-dir, --toolkit-lib-dir,
// --metrics-auth as vgpu-device-plugin has it), as --name=value or --name value
// (--driver-uuids alone means true), from the arguments.
func splitOwnFlags(args []string) (map[string]string, []string) {
	own, rest := map[string]string{"machine": "dgxa100", "driver-uuids": "false", "fault-dir": "", "toolkit-cdi-dir": "",
		"toolkit-driver-dir": "", "toolkit-lib-dir": "/usr/lib/x86_64-linux-gnu", "metrics-auth": "none"}, make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(args[i], "--"), "=")
		if _, ours := own[name]; !ours || !strings.HasPrefix(args[i], "--") {
			rest = append(rest, args[i])
			continue
		}
		if !hasValue && name == "driver-uuids" {
			value = "true"
		} else if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		own[name] = value
	}
	return own, rest
}

// NewMachine builds the named fake machine with UUIDs GPU-<node>-<index>, or with
// driverUUIDs in the form the driver reports (driverUUID).
func NewMachine(shape, node string, driverUUIDs bool) (nvml.Interface, error) {
	uuid := func(i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }
	if driverUUIDs {
		uuid = func(i int) string { return driverUUID(node, i) }
	}
	switch {
	case shape == "dgxa100":
		s := nvmlfake.DGXA100()
		for i, d := range s.Devices {
			d.(*dgxa100.Device).UUID = uuid(i)
		}
		return s, nil
	case shape == "a30x4":
		return renamed(nvmlfake.FourCardsTwoNUMA(), uuid), nil
	case strings.HasPrefix(shape, "l40sx"):
		n, err := strconv.Atoi(strings.TrimPrefix(shape, "l40sx"))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("machine %q: want l40sx1..l40sx64", shape)
		}
		return renamed(nvmlfake.Cards(n), uuid), nil
	case shape == "h100migx2":
		m, err := h100MIG()
		if err != nil {
			return nil, fmt.Errorf("machine %s: %w", shape, err)
		}
		return renamed(m, uuid), nil
	}
	return nil, fmt.Errorf("unknown machine %q (dgxa100, a30x4, l40sxN, h100migx2)", shape)
}

// h100MIG is two H100 80GB in MIG mode laid out as an administrator would have with
// nvidia-smi before the agent starts: card 0 split into two 3g.40gb, card 1 into a
// 3g.40gb and four 1g.10gb (memory slices 0 to 3).
func h100MIG() (*nvmlfake.Machine, error) {
	m := nvmlfake.MIGCards(nvmlfake.H100SXM5x80GB(), nvmlfake.H100SXM5x80GB())
	for _, in := range []struct {
		card    int
		profile string
		start   int
	}{
		{0, "3g.40gb", 0}, {0, "3g.40gb", 4},
		{1, "3g.40gb", 4}, {1, "1g.10gb", 0}, {1, "1g.10gb", 1}, {1, "1g.10gb", 2}, {1, "1g.10gb", 3},
	} {
		if _, err := m.CreateMIGDevice(in.card, in.profile, in.start); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// driverUUID is card i's UUID in the driver's form, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx:
// vgpu-core matches a CUDA device to its limits by the UUID's 16 bytes, so a card a real
// process uses (through the stub driver) needs one. The first group is the node name's
// FNV-1a hash (unique across the harness's nodes), the last the index in decimal digits
// (GPU-2f1c0a9e-0000-4000-8000-000000000003 is card 3), as the harness reads it.
func driverUUID(node string, i int) string {
	h := fnv.New32a()
	h.Write([]byte(node))
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012d", h.Sum32(), i)
}

func renamed(m *nvmlfake.Machine, uuid func(int) string) *nvmlfake.Machine {
	for i, d := range m.Devices {
		orig, id := d.GetUUIDFunc, uuid(i)
		d.GetUUIDFunc = func() (string, nvml.Return) {
			if _, ret := orig(); ret != nvml.SUCCESS {
				return "", ret
			}
			return id, nvml.SUCCESS
		}
	}
	return m
}
