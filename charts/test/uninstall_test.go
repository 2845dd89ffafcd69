package charttest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func hookMountReadOnly(t *testing.T, r *Rendered) bool {
	t.Helper()
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	return mounts(&ds.Spec.Template.Spec.Containers[0])["hook-library"].ReadOnly
}

// By default the agent may watch its own DaemonSet and nothing else, and may write the hook
// library's directory, so that it can remove the files on helm uninstall.
func TestTheAgentMayWatchOnlyItsOwnDaemonSetToCleanUpOnUninstall(t *testing.T) {
	r := MustRender(t, "")
	var role rbacv1.Role
	r.Get(t, "Role", "gpu-tessera-vgpu-device-plugin-uninstall", &role)
	if role.Namespace != "volcano-system" || len(role.Rules) != 1 {
		t.Fatalf("uninstall Role in %q with rules %+v, want one rule in the release namespace", role.Namespace, role.Rules)
	}
	rule := role.Rules[0]
	if strings.Join(rule.APIGroups, ",") != "apps" || strings.Join(rule.Resources, ",") != "daemonsets" ||
		strings.Join(rule.ResourceNames, ",") != "gpu-tessera-vgpu-device-plugin" || strings.Join(rule.Verbs, ",") != "get,list,watch" {
		t.Errorf("uninstall Role rule %+v, want get/list/watch of daemonsets/gpu-tessera-vgpu-device-plugin only", rule)
	}
	var rb rbacv1.RoleBinding
	r.Get(t, "RoleBinding", "gpu-tessera-vgpu-device-plugin-uninstall", &rb)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "gpu-tessera-vgpu-device-plugin" || rb.Subjects[0].Namespace != "volcano-system" ||
		rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("uninstall RoleBinding subjects %+v roleRef %+v", rb.Subjects, rb.RoleRef)
	}
	if hookMountReadOnly(t, r) {
		t.Error("the agent mounts the hook library read-only: it could not remove it on uninstall")
	}
}

func TestKeepingHostFilesDropsTheRoleAndTheWritableMount(t *testing.T) {
	r := MustRender(t, "testdata/keep-host-files.yaml")
	for _, n := range r.Names() {
		if strings.Contains(n, "-uninstall") {
			t.Errorf("%s rendered with removeHostFilesOnUninstall: false", n)
		}
	}
	if !hookMountReadOnly(t, r) {
		t.Error("the agent mounts the hook library writable although it never removes it")
	}
}

func TestTheUninstallRoleIsBoundToTheAgentsServiceAccount(t *testing.T) {
	r := MustRender(t, "testdata/agent-service-account.yaml")
	var ds appsv1.DaemonSet
	r.Get(t, "DaemonSet", "gpu-tessera-vgpu-device-plugin", &ds)
	var rb rbacv1.RoleBinding
	r.Get(t, "RoleBinding", "gpu-tessera-vgpu-device-plugin-uninstall", &rb)
	if sa := ds.Spec.Template.Spec.ServiceAccountName; sa != "gpu-agent" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa {
		t.Errorf("the agent runs as %q, the uninstall RoleBinding binds %+v", sa, rb.Subjects)
	}
}
