package scale

import (
	"fmt"
	"os"
	"path/filepath"
)

// Mode is one scheduler of the comparison. All three are the same vc-scheduler binary
// (Tessera's, which embeds every Volcano plugin at v1.14.1) run with a different
// volcano-scheduler.conf: the fair comparison, since only the plugins differ.
type Mode string

// The three schedulers.
const (
	// Floor is Volcano with no device plugin; the jobs are submitted without their vGPU
	// resources, so it places the same pods by CPU and memory only.
	Floor Mode = "floor"
	// DeviceShare is Volcano's deviceshare with VGPUEnable (binpack), reading the HAMi
	// registration on the nodes.
	DeviceShare Mode = "deviceshare"
	// Tessera is Tessera's vgpu plugin with the shipped config/volcano-scheduler.conf.
	Tessera Mode = "tessera"
)

// Modes in the order a run takes them.
var Modes = []Mode{Floor, DeviceShare, Tessera}

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("scheduler %q: want floor, deviceshare or tessera", s)
}

// The floor and deviceshare confs keep the shipped conf's actions and Volcano plugins;
// only the device plugin differs.
const volcanoTiers = `actions: "enqueue, allocate, backfill, preempt, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
  - name: sla
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
`

const floorDevice = `  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: false
`

const deviceShareDevice = `  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: true
      deviceshare.SchedulePolicy: binpack
      deviceshare.ScheduleWeight: 10
`

// WriteConf writes the mode's volcano-scheduler.conf into dir and returns its path.
// root is the repository root (Tessera's shipped conf).
func WriteConf(m Mode, root, dir string) (string, error) {
	var body []byte
	switch m {
	case Floor:
		body = []byte(volcanoTiers + floorDevice)
	case DeviceShare:
		body = []byte(volcanoTiers + deviceShareDevice)
	case Tessera:
		b, err := os.ReadFile(filepath.Join(root, "config", "volcano-scheduler.conf"))
		if err != nil {
			return "", err
		}
		body = b
	default:
		return "", fmt.Errorf("unknown scheduler %q", m)
	}
	file := filepath.Join(dir, "volcano-scheduler-"+string(m)+".conf")
	return file, os.WriteFile(file, body, 0o644)
}
