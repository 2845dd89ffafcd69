package charttest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

const draValues = "devicePlugin:\n  config: {cardAPI: dra}\n"

func renderDRA(t *testing.T, values string) *Rendered {
	t.Helper()
	r, err := RenderValues(t, values)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// With cardAPI dra the agent's ClusterRole adds exactly what the kubelet plugin helper
// calls: its ResourceSlices (list, watch, create, update, delete) and the claims it
// prepares (get); the Node reads it already has. The default grants neither.
func TestTheAgentMayKeepItsResourceSliceAndReadClaimsOnlyInDRAMode(t *testing.T) {
	draRules := map[rule]bool{
		{"resource.k8s.io", "resourceslices", "list"}: true, {"resource.k8s.io", "resourceslices", "watch"}: true,
		{"resource.k8s.io", "resourceslices", "create"}: true, {"resource.k8s.io", "resourceslices", "update"}: true,
		{"resource.k8s.io", "resourceslices", "delete"}: true, {"resource.k8s.io", "resourceclaims", "get"}: true,
	}
	agentRules := func(r *Rendered) map[rule]bool {
		var cr rbacv1.ClusterRole
		r.Get(t, "ClusterRole", "gpu-tessera-vgpu-device-plugin", &cr)
		return flatten(cr.Rules)
	}
	plain, dra := agentRules(MustRender(t, "")), agentRules(renderDRA(t, draValues))
	for r := range draRules {
		if plain[r] {
			t.Errorf("device-plugin mode grants %s %s", r.verb, r.resource)
		}
		if !dra[r] {
			t.Errorf("dra mode does not grant %s %s: the DRA driver needs it", r.verb, r.resource)
		}
	}
	for r := range dra {
		if !plain[r] && !draRules[r] {
			t.Errorf("dra mode grants %s %s in %q beyond what the DRA driver calls", r.verb, r.resource, r.group)
		}
	}
	for _, r := range []rule{{"", "nodes", "get"}, {"", "nodes", "list"}, {"", "nodes", "watch"}} {
		if !dra[r] {
			t.Errorf("dra mode lacks %s nodes: the driver reads its Node", r.verb)
		}
	}
}

// The DeviceClass the chart installs in dra mode is the one docs/dra.md shows, which the
// DRA driver's tests validate with the API server's own validation; it is absent by
// default.
func TestTheDeviceClassIsInstalledOnlyInDRAMode(t *testing.T) {
	if MustRender(t, "").Has("DeviceClass", "vgpu.tessera.io") {
		t.Error("the default render installs the DeviceClass vgpu.tessera.io")
	}
	r := renderDRA(t, draValues)
	var got resourceapi.DeviceClass
	r.Get(t, "DeviceClass", "vgpu.tessera.io", &got)
	b, err := os.ReadFile(filepath.Join(ChartDir, "..", "..", "deviceplugin", "dra", "testdata", "deviceclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want resourceapi.DeviceClass
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatal(err)
	}
	if got.APIVersion != "resource.k8s.io/v1" || !reflect.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("DeviceClass %s %+v, want the documented %+v", got.APIVersion, got.Spec, want.Spec)
	}
	if r := renderDRA(t, "devicePlugin:\n  enabled: false\n  config: {cardAPI: dra}\n"); r.Has("DeviceClass", "vgpu.tessera.io") {
		t.Error("the DeviceClass is installed without the agent that serves it")
	}
}

// In dra mode the agent mounts the driver's socket directory and the kubelet's
// registration directory, writable, at their host paths, and the CDI directories (it
// writes claim specs and reads the NVIDIA toolkit's); it no longer mounts the device
// plugin directory. Other paths follow draPluginDir and draRegistrationDir.
func TestTheAgentMountsTheDRADirectoriesInDRAMode(t *testing.T) {
	for _, tt := range []struct {
		name, values, plugin, registration string
	}{
		{"the kubelet's defaults", draValues, "/var/lib/kubelet/plugins/vgpu.tessera.io", "/var/lib/kubelet/plugins_registry"},
		{"another kubelet root", "devicePlugin:\n  config: {cardAPI: dra, draPluginDir: /data/kubelet/plugins/, draRegistrationDir: /data/kubelet/plugins_registry}\n",
			"/data/kubelet/plugins/vgpu.tessera.io", "/data/kubelet/plugins_registry"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ds appsv1.DaemonSet
			renderDRA(t, tt.values).Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
			hp := hostPaths(&ds)
			m := mounts(&ds.Spec.Template.Spec.Containers[0])
			for name, path := range map[string]string{"dra-plugin": tt.plugin, "dra-registration": tt.registration, "cdi-specs": "/var/run/cdi"} {
				if hp[name] != path || m[name].MountPath != path || m[name].ReadOnly {
					t.Errorf("%s: host %q mounted at %q read-only %t, want %s writable at the same path", name, hp[name], m[name].MountPath, m[name].ReadOnly, path)
				}
			}
			if m["cdi-static-specs"].MountPath != "/etc/cdi" || !m["cdi-static-specs"].ReadOnly {
				t.Errorf("/etc/cdi mounted as %+v, want read-only", m["cdi-static-specs"])
			}
			if _, ok := hp["device-plugins"]; ok {
				t.Errorf("dra mode mounts the device plugin directory: %v", hp)
			}
		})
	}
	var ds appsv1.DaemonSet
	MustRender(t, "").Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	for _, v := range []string{"dra-plugin", "dra-registration"} {
		if _, ok := hostPaths(&ds)[v]; ok {
			t.Errorf("device-plugin mode mounts %s", v)
		}
	}
}

// The schema refuses a misspelt card API or a relative DRA directory, naming the value.
func TestTheSchemaRefusesBadCardAPIValues(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"devicePlugin:\n  config: {cardAPI: DRA}\n", "cardAPI"},
		{"devicePlugin:\n  config: {draPluginDir: var/lib/kubelet/plugins}\n", "draPluginDir"},
		{"devicePlugin:\n  config: {draRegistrationDir: plugins_registry}\n", "draRegistrationDir"},
	} {
		if _, err := RenderValues(t, c.values); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %q: err = %v, want a schema error naming %s", c.values, err, c.want)
		}
	}
}
