package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// volcanoSchedulerRules reads the scheduler ClusterRole of Volcano's own installer (the
// version this module requires, v1.14.1) from the module cache: the facts the chart's
// role must match.
func volcanoSchedulerRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "volcano.sh/volcano").Output()
	if err != nil {
		t.Fatalf("locate volcano.sh/volcano in the module cache: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "installer", "helm", "chart", "volcano", "templates", "scheduler.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("Volcano's installer: %v", err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		if !strings.Contains(doc, "kind: ClusterRole\n") {
			continue
		}
		// Drop the template lines (labels); the rules are plain YAML.
		var keep []string
		for _, l := range strings.Split(doc, "\n") {
			if !strings.Contains(l, "{{") {
				keep = append(keep, l)
			}
		}
		var cr struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(strings.Join(keep, "\n")), &cr); err != nil {
			t.Fatalf("Volcano's scheduler ClusterRole: %v", err)
		}
		if len(cr.Rules) > 0 {
			return cr.Rules
		}
	}
	t.Fatalf("no ClusterRole with rules in %s", path)
	return nil
}

func TestSchedulerPermissionsAreExactlyVolcanosWithLeasesNamespaced(t *testing.T) {
	r := MustRender(t, "")
	var cr rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-scheduler", &cr)
	var role rbacv1.Role
	r.Get(t, "Role", "gpu-tessera-scheduler-leader-election", &role)
	ours := flatten(cr.Rules)
	lease := flatten(role.Rules)
	theirs := flatten(volcanoSchedulerRules(t))
	for p := range theirs {
		switch {
		case p.resource == "leases":
			if !lease[p] {
				t.Errorf("Volcano's scheduler may %s leases; the namespaced Role does not grant it", p.verb)
			}
		case !ours[p]:
			t.Errorf("Volcano's scheduler may %s %q in group %q; ours may not", p.verb, p.resource, p.group)
		}
	}
	for p := range ours {
		if !theirs[p] {
			t.Errorf("ours may %s %q in group %q; Volcano's scheduler may not", p.verb, p.resource, p.group)
		}
	}
	for p := range lease {
		if !theirs[p] {
			t.Errorf("the leader-election Role grants %+v beyond Volcano's", p)
		}
	}
}
