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

// metricsAuth is what the guarded /metrics adds (metrics.authentication).
var metricsAuth = map[rule]bool{
	{"authentication.k8s.io", "tokenreviews", "create"}: true, {"authorization.k8s.io", "subjectaccessreviews", "create"}: true,
}

// notNeeded is what Volcano v1.14.1's installer grants its scheduler and the default
// configuration does not use (docs/security.md says why for each). A permission
// Volcano adds or ours drops shows up here first.
var notNeeded = func() map[rule]bool {
	m := map[rule]bool{}
	add := func(group, resource string, verbs ...string) {
		for _, v := range verbs {
			m[rule{group, resource, v}] = true
		}
	}
	add("apiextensions.k8s.io", "customresourcedefinitions", "create", "get", "list", "watch", "delete") // the scheduler reads no CRD
	add("batch.volcano.sh", "jobs", "update", "delete")                                                  // the job controller's (vgpu only reads them)
	add("batch.volcano.sh", "jobs/status", "update", "patch")
	add("", "events", "list", "watch")                                          // the recorder only writes
	add("", "pods", "patch")                                                    // deviceshare only
	add("", "nodes", "update", "patch")                                         // deviceshare's node lock only
	add("", "configmaps", "get", "list", "watch", "create", "delete", "update") // deviceshare reads one
	add("scheduling.volcano.sh", "queues", "delete")
	add("scheduling.incubator.k8s.io", "queues", "delete")
	add("resource.k8s.io", "resourceclaims", "create", "update", "patch") // DRA in predicates only
	add("resource.k8s.io", "resourceclaims/status", "update")
	add("resource.k8s.io", "deviceclasses", "create")
	add("resource.k8s.io", "resourceslices", "create")
	add("shard.volcano.sh", "nodeshards/status", "update") // sharding only
	return m
}()

func schedulerRules(t *testing.T, values string) (cluster, lease map[rule]bool) {
	t.Helper()
	r, err := RenderValues(t, values)
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	r.Get(t, "ClusterRole", "gpu-tessera-scheduler", &cr)
	var role rbacv1.Role
	if r.Has("Role", "gpu-tessera-scheduler-leader-election") {
		r.Get(t, "Role", "gpu-tessera-scheduler-leader-election", &role)
	}
	return flatten(cr.Rules), flatten(role.Rules)
}

// The default role is Volcano's minus what the shipped configuration does not use, plus
// the guarded /metrics' reviews; leases are namespaced.
func TestSchedulerPermissionsAreVolcanosMinusWhatTheConfigurationDoesNotUse(t *testing.T) {
	ours, lease := schedulerRules(t, "")
	theirs := flatten(volcanoSchedulerRules(t))
	for p := range theirs {
		switch {
		case p.resource == "leases":
			if !lease[p] {
				t.Errorf("Volcano's scheduler may %s leases; the namespaced Role does not grant it", p.verb)
			}
		case notNeeded[p]:
			if ours[p] {
				t.Errorf("ours may %s %q in group %q, which the default configuration does not use", p.verb, p.resource, p.group)
			}
		case !ours[p]:
			t.Errorf("Volcano's scheduler may %s %q in group %q; ours may not, and notNeeded does not say why", p.verb, p.resource, p.group)
		}
	}
	for p := range ours {
		if !theirs[p] && !metricsAuth[p] {
			t.Errorf("ours may %s %q in group %q; Volcano's scheduler may not", p.verb, p.resource, p.group)
		}
	}
	for p := range notNeeded {
		if !theirs[p] {
			t.Errorf("notNeeded lists %+v, which Volcano's role does not grant", p)
		}
	}
	for p := range lease {
		if !theirs[p] {
			t.Errorf("the leader-election Role grants %+v beyond Volcano's", p)
		}
	}
}

// scheduler.rbac.volcanoClusterRole grants Volcano's role as it is.
func TestTheWholeVolcanoRoleCanBeChosen(t *testing.T) {
	ours, _ := schedulerRules(t, "scheduler:\n  rbac: {volcanoClusterRole: true}\nmetrics: {authentication: false}\n")
	theirs := flatten(volcanoSchedulerRules(t))
	for p := range theirs {
		if !ours[p] && p.resource != "leases" {
			t.Errorf("volcanoClusterRole: Volcano's scheduler may %s %q in group %q; ours may not", p.verb, p.resource, p.group)
		}
	}
	for p := range ours {
		if !theirs[p] {
			t.Errorf("volcanoClusterRole: ours may %s %q in group %q beyond Volcano's", p.verb, p.resource, p.group)
		}
	}
}

// What the configuration turns on brings its permissions with it.
func TestSchedulerPermissionsFollowTheConfiguration(t *testing.T) {
	for _, c := range []struct {
		name, values string
		need         []rule
	}{
		{"the default conf's preempt and reclaim evict", "", []rule{{"", "pods", "delete"}}},
		{"preempt evicts", "scheduler:\n  conf: {actions: \"enqueue, allocate, preempt, backfill\"}\n", []rule{{"", "pods", "delete"}}},
		{"reclaim in an override evicts", "scheduler:\n  conf:\n    override: |\n      actions: \"enqueue, allocate, reclaim\"\n      tiers:\n      - plugins:\n        - name: gang\n",
			[]rule{{"", "pods", "delete"}}},
		{"deviceshare patches pods, locks nodes, reads its ConfigMap", "", nil},
		{"the DRA plugin writes claims", "scheduler:\n  conf:\n    tiers:\n      - plugins:\n          - name: predicates\n            arguments: {predicate.DynamicResourceAllocationEnable: true}\n",
			[]rule{{"resource.k8s.io", "resourceclaims", "update"}, {"resource.k8s.io", "resourceclaims/status", "update"}}},
		{"the queue gate is removed by the scheduler", "admission:\n  config:\n    queueGate: true\n", []rule{{"", "pods", "patch"}}},
		{"MIG plans are written on Nodes", "devicePlugin:\n  config:\n    migRepartition: true\n", []rule{{"", "nodes", "patch"}}},
		{"sharding reports its shards", "scheduler:\n  extraArgs: [--scheduler-sharding-mode=hard]\n", []rule{{"shard.volcano.sh", "nodeshards/status", "update"}}},
		{"extra rules", "scheduler:\n  rbac:\n    extraRules: [{apiGroups: [example.com], resources: [widgets], verbs: [get]}]\n",
			[]rule{{"example.com", "widgets", "get"}}},
	} {
		values := c.values
		if c.name == "deviceshare patches pods, locks nodes, reads its ConfigMap" {
			values = ""
			b, err := os.ReadFile("testdata/custom-values.yaml") // tiers with a deviceshare entry
			if err != nil {
				t.Fatal(err)
			}
			values = string(b)
			c.need = []rule{{"", "pods", "patch"}, {"", "nodes", "update"}, {"", "nodes", "patch"}, {"", "configmaps", "get"}}
		}
		ours, _ := schedulerRules(t, values)
		for _, p := range c.need {
			if !ours[p] {
				t.Errorf("%s: the scheduler may not %s %q in group %q", c.name, p.verb, p.resource, p.group)
			}
		}
	}
	ours, _ := schedulerRules(t, "")
	for _, p := range []rule{{"", "pods", "patch"}, {"", "nodes", "patch"}, {"", "configmaps", "get"},
		{"resource.k8s.io", "resourceclaims", "update"}, {"shard.volcano.sh", "nodeshards/status", "update"}} {
		if ours[p] {
			t.Errorf("default configuration: the scheduler may %s %q, which it does not use", p.verb, p.resource)
		}
	}
	// A conf without an evicting action evicts nothing, so it may delete no pod.
	ours, _ = schedulerRules(t, "scheduler:\n  conf: {actions: \"enqueue, allocate, backfill\"}\n")
	if ours[rule{"", "pods", "delete"}] {
		t.Errorf("actions enqueue, allocate, backfill: the scheduler may delete pods, which it does not use")
	}
}
