package pluginargs

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// InvalidError reports arguments the plugin refuses; the Args returned with it hold
// the defaults for those, as the scheduler does.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return "volcano-scheduler.conf: " + e.Err.Error() }

func (e *InvalidError) Unwrap() error { return e.Err }

// ErrNotEnabled is FromConf's answer for a conf without the plugin.
var ErrNotEnabled = fmt.Errorf("volcano-scheduler.conf does not enable the %s plugin", Plugin)

// FromConf finds the plugin in a volcano-scheduler.conf and parses its arguments
// as the plugin does (an *InvalidError names the arguments it refused; the Args are
// still usable). A conf without the plugin is ErrNotEnabled: the scheduler it
// describes would not place vGPU pods at all.
func FromConf(conf string) (Args, error) {
	var c struct {
		Tiers []struct {
			Plugins []struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"plugins"`
		} `json:"tiers"`
	}
	if err := yaml.Unmarshal([]byte(conf), &c); err != nil {
		return Args{}, fmt.Errorf("volcano-scheduler.conf: %w", err)
	}
	for _, t := range c.Tiers {
		for _, p := range t.Plugins {
			if p.Name == Plugin {
				a, err := Parse(p.Arguments)
				if err != nil {
					return a, &InvalidError{Err: err}
				}
				return a, nil
			}
		}
	}
	return Args{}, ErrNotEnabled
}

// confPlugin is one plugin entry of a volcano-scheduler.conf tier, with the switches
// that decide whether Volcano asks it for eviction victims. Volcano treats an absent
// switch as on.
type confPlugin struct {
	Name              string         `json:"name"`
	EnablePreemptable *bool          `json:"enablePreemptable"`
	EnableReclaimable *bool          `json:"enableReclaimable"`
	Arguments         map[string]any `json:"arguments"`
}

func on(b *bool) bool { return b == nil || *b }

// queueVictimPlugins offer reclaim victims by queue share, knowing nothing of cards.
var queueVictimPlugins = map[string]bool{"proportion": true, "capacity": true}

// ConfFindings reads a volcano-scheduler.conf for the settings that keep the vgpu
// plugin from doing its job, and says each in words (none: nothing found):
//   - vgpu outside the first tier while preempt or reclaim run: Volcano takes victims
//     from the first tier that offers any, so pods whose cards do not help can go;
//   - proportion or capacity offering reclaim victims in a later tier: a gang whose
//     members share a card freed by reclaim is then not served (the plugin refuses
//     rather than let a card-blind tier evict), it waits for free cards instead;
//   - deviceshare with VGPUEnable: two plugins would manage the same resources.
//
// A conf that does not parse is an error; one without the plugin is ErrNotEnabled.
func ConfFindings(conf string) ([]string, error) {
	var c struct {
		Actions string `json:"actions"`
		Tiers   []struct {
			Plugins []confPlugin `json:"plugins"`
		} `json:"tiers"`
	}
	if err := yaml.Unmarshal([]byte(conf), &c); err != nil {
		return nil, fmt.Errorf("volcano-scheduler.conf: %w", err)
	}
	actions := map[string]bool{}
	for _, a := range strings.Split(c.Actions, ",") {
		actions[strings.TrimSpace(a)] = true
	}
	tier := -1
	for i, t := range c.Tiers {
		for _, p := range t.Plugins {
			if p.Name == Plugin && tier < 0 {
				tier = i
			}
		}
	}
	if tier < 0 {
		return nil, ErrNotEnabled
	}
	var out []string
	if tier > 0 && (actions["preempt"] || actions["reclaim"]) {
		out = append(out, fmt.Sprintf("the %s plugin is in tier %d, not the first: Volcano takes preempt and reclaim victims "+
			"from the first tier that offers any, so pods whose cards do not help the waiting task can be evicted; "+
			"put %s in the first tier", Plugin, tier+1, Plugin))
	}
	for i, t := range c.Tiers {
		for _, p := range t.Plugins {
			if i > tier && actions["reclaim"] && queueVictimPlugins[p.Name] && on(p.EnableReclaimable) {
				out = append(out, fmt.Sprintf("%s (tier %d) offers reclaim victims (enableReclaimable is not false): "+
					"a gang whose members would share a card freed by reclaim is not served by reclaim and waits for free "+
					"cards; set enableReclaimable: false on %s (docs/queues.md)", p.Name, i+1, p.Name))
			}
			if p.Name == "deviceshare" {
				if v, ok := toBool(p.Arguments["deviceshare.VGPUEnable"]); ok && v {
					out = append(out, "deviceshare.VGPUEnable is true: Volcano's deviceshare and Tessera's "+Plugin+
						" plugin would both manage the vGPU resources and hand out cards twice; turn it off")
				}
			}
		}
	}
	return out, nil
}
