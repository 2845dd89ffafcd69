package pluginargs

import (
	"fmt"

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
