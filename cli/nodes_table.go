package cli

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tessera-gpu/tessera/api"
)

// nodeColumns are the columns of `tessera nodes`; Priority 1 only with -o wide.
func nodeColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Node", Type: "string", Format: "name"},
		{Name: "Card", Type: "string"},
		{Name: "Model", Type: "string"},
		{Name: "Memory(MiB)", Type: "string", Description: "used/schedulable memory"},
		{Name: "Cores", Type: "string", Description: "percent of the card's SMs in use"},
		{Name: "Shares", Type: "string", Description: "tenants/shares"},
		{Name: "QoS", Type: "string"},
		{Name: "Health", Type: "string"},
		{Name: "UUID", Type: "string", Priority: 1},
		{Name: "NUMA", Type: "string", Priority: 1},
		{Name: "Physical(MiB)", Type: "string", Priority: 1, Description: "memory before oversubscription"},
		{Name: "Source", Type: "string", Priority: 1, Description: "the annotation the cards were read from: tessera or hami"},
		{Name: "Pods", Type: "string"},
	}
}

// nodesTable is the nodes view as kubectl's table: a row per card; a node without
// usable cards gets one row with its status and why; a pod whose cards cannot be
// accounted gets a row "!" under its node.
//
// When a node listed serves DRA devices, an API column after Node says each node's
// card API (dp or dra), and a DRA node's cards show what its ResourceClaims consume:
// memory used of the card's memory, cores, claims (no share limit: "N/-"), the pods the
// claims are reserved for; "unknown" where the claims could not be read.
func nodesTable(nodes []NodeView) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: nodeColumns()}
	showAPI := false
	for _, n := range nodes {
		showAPI = showAPI || n.CardAPI == api.CardAPIDRA
	}
	if showAPI {
		t.ColumnDefinitions = append(t.ColumnDefinitions[:1:1], append([]metav1.TableColumnDefinition{{Name: "API", Type: "string",
			Description: "how the node's agent offers its cards: dp (device plugin) or dra (DRA devices)"}}, t.ColumnDefinitions[1:]...)...)
	}
	for _, n := range nodes {
		row := func(cells ...any) { t.Rows = append(t.Rows, metav1.TableRow{Cells: cells}) }
		if showAPI {
			cardAPI := "dp"
			switch {
			case n.CardAPI == api.CardAPIDRA:
				cardAPI = "dra"
			case n.Status == StatusNoInventory:
				cardAPI = "-"
			}
			row = func(cells ...any) {
				t.Rows = append(t.Rows, metav1.TableRow{Cells: append([]any{cells[0], cardAPI}, cells[1:]...)})
			}
		}
		source := dash(n.Source)
		if n.Status != StatusReady {
			row(n.Name, "-", "-", "-", "-", "-", "-", n.Status, "-", "-", "-", source, dash(n.Reason))
			continue
		}
		for _, c := range n.Cards {
			health := cardHealth(c)
			if c.MIG {
				migRows(row, n.Name, c, health, source)
				continue
			}
			if n.CardAPI == api.CardAPIDRA {
				draRow(row, n, c, health, source)
				continue
			}
			row(n.Name, strconv.Itoa(c.Index), c.Model, fmt.Sprintf("%d/%d", c.UsedMemoryMiB, c.CapacityMiB),
				fmt.Sprintf("%d%%", c.UsedCores), fmt.Sprintf("%d/%d", c.Tenants, c.Shares), dash(c.QoS), health,
				c.UUID, strconv.Itoa(c.NUMA), strconv.FormatInt(c.MemoryMiB, 10), source, podList(c.Pods))
		}
		for _, p := range n.Problems {
			row(n.Name, "!", "-", "-", "-", "-", "-", "problem", "-", "-", "-", source, p)
		}
	}
	return t
}

// draRow is a DRA node's card: what its claims consume, or "unknown" where the claims
// could not be read.
func draRow(row func(...any), n NodeView, c CardView, health, source string) {
	mem, cores, shares, qos, pods := fmt.Sprintf("%d/%d", c.UsedMemoryMiB, c.CapacityMiB), fmt.Sprintf("%d%%", c.UsedCores),
		fmt.Sprintf("%d/-", c.Tenants), dash(c.QoS), claimPods(c)
	if n.ClaimsUnknown != "" {
		mem, cores, shares, qos, pods = fmt.Sprintf("unknown/%d", c.CapacityMiB), "unknown", "unknown", "unknown", "unknown"
	}
	row(n.Name, strconv.Itoa(c.Index), c.Model, mem, cores, shares, qos, health,
		c.UUID, strconv.Itoa(c.NUMA), strconv.FormatInt(c.MemoryMiB, 10), source, pods)
}

// claimPods are the pods holding a DRA card, and each claim reserved for no pod as
// "NAMESPACE/claim:NAME".
func claimPods(c CardView) string {
	var parts []string
	for _, t := range c.Pods {
		parts = append(parts, t.Namespace+"/"+t.Pod)
	}
	for _, cl := range c.Claims {
		if len(cl.Pods) == 0 {
			parts = append(parts, cl.Namespace+"/claim:"+cl.Name)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// migRows are a card in MIG mode's rows: the card, with its instances held of all
// (Shares) or why none can be handed out (Pods), then one row per instance, "<card>/<n>":
// its profile, its memory held of its memory, held or free, and its MIG UUID.
func migRows(row func(...any), node string, c CardView, health, source string) {
	used, mem := 0, int64(0)
	for _, in := range c.MIGInstances {
		mem += in.MemoryMiB
		if len(in.Pods) > 0 {
			used++
		}
	}
	pods, shares := podList(c.Pods), fmt.Sprintf("%d/%d", used, len(c.MIGInstances))
	if c.MIGLayout != "" {
		pods, shares = "MIG layout unknown: "+c.MIGLayout, "-"
	}
	row(node, strconv.Itoa(c.Index), c.Model, "-", "-", shares, "-", health,
		c.UUID, strconv.Itoa(c.NUMA), strconv.FormatInt(c.MemoryMiB, 10), source, pods)
	for i, in := range c.MIGInstances {
		held, state := int64(0), "free"
		if len(in.Pods) > 0 {
			held, state = in.MemoryMiB, "used"
		}
		row(node, strconv.Itoa(c.Index)+"/"+strconv.Itoa(i), in.Profile, fmt.Sprintf("%d/%d", held, in.MemoryMiB), "-",
			fmt.Sprintf("%d/1", min(1, len(in.Pods))), "-", state, in.UUID, strconv.Itoa(c.NUMA), strconv.FormatInt(in.MemoryMiB, 10),
			source, podList(in.Pods))
	}
}

// pickNodes keeps the nodes named (every node when none is) whose labels match sel,
// in the view's order; the names that are no node come back as missing.
func pickNodes(view []NodeView, nodes []corev1.Node, names []string, sel labels.Selector) (picked []NodeView, missing []string) {
	match := map[string]bool{}
	for i := range nodes {
		match[nodes[i].Name] = sel.Matches(labels.Set(nodes[i].Labels))
	}
	want := map[string]bool{}
	for _, n := range names {
		if _, ok := match[n]; !ok {
			missing = append(missing, n)
		}
		want[n] = true
	}
	for _, v := range view {
		if match[v.Name] && (len(names) == 0 || want[v.Name]) {
			picked = append(picked, v)
		}
	}
	return picked, missing
}

// cardHealth is a card's Health cell: ok, mig or UNHEALTHY, and a cordon with its
// reason (cut at maxCordonCell runes; -o json has all of it).
func cardHealth(c CardView) string {
	health := "ok"
	switch {
	case c.MIG:
		health = "mig"
	case !c.Healthy:
		health = "UNHEALTHY"
	}
	if c.Cordon == nil {
		return health
	}
	if health == "ok" {
		health = "cordoned"
	} else {
		health += ",cordoned"
	}
	if r := []rune(c.Cordon.Reason); len(r) > maxCordonCell {
		return health + ": " + string(r[:maxCordonCell-1]) + "…"
	} else if len(r) > 0 {
		return health + ": " + string(r)
	}
	return health
}

const maxCordonCell = 40
