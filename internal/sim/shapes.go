package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tessera-gpu/tessera/api"
)

// Shape is a kind of GPU machine that capacity planning adds to a cluster: Count
// cards of one model, half of them on each of two NUMA nodes.
type Shape struct {
	// Name is the shape as the user wrote it, e.g. "dgxa100" or "H100x8".
	Name      string
	Model     string
	MemoryMiB int64
	Cards     int
}

// cardModel is a card model the MODELxCOUNT form accepts: the name NVML reports
// and its memory. The figures are those of the fake machines in
// internal/testing/nvmlfake (go-nvml's DGX A100 mock and the MIG model tables).
type cardModel struct {
	key, name string
	memoryMiB int64
}

func cardModels() []cardModel {
	return []cardModel{
		{"a100", "NVIDIA A100-SXM4-40GB", 40960},
		{"a100-80gb", "NVIDIA A100-SXM4-80GB", 81920},
		{"h100", "NVIDIA H100 80GB HBM3", 81559},
		{"b200", "NVIDIA B200", 184320},
		{"l40s", "NVIDIA L40S", 46068},
		{"a30", "NVIDIA A30", 24576},
		{"t4", "Tesla T4", 15360},
	}
}

// namedShapes are whole machines known by name.
func namedShapes() map[string]string {
	return map[string]string{"dgxa100": "a100x8"} // go-nvml's fake DGX A100: 8 × A100-SXM4-40GB
}

// maxShapeCards bounds COUNT: the largest fake machine has 16 cards.
const maxShapeCards = 16

// ParseShape reads SHAPE: a named machine (dgxa100) or MODELxCOUNT (H100x8), the
// model case-insensitive. The error names the value as written and what is known.
func ParseShape(s string) (Shape, error) {
	spec := strings.ToLower(strings.TrimSpace(s))
	if alias, ok := namedShapes()[spec]; ok {
		spec = alias
	}
	i := strings.LastIndex(spec, "x")
	if i <= 0 || i == len(spec)-1 {
		return Shape{}, shapeError(s, "want a machine name or MODELxCOUNT")
	}
	n, err := strconv.Atoi(spec[i+1:])
	if err != nil || n < 1 || n > maxShapeCards {
		return Shape{}, shapeError(s, fmt.Sprintf("COUNT %q must be a whole number in 1..%d", spec[i+1:], maxShapeCards))
	}
	for _, m := range cardModels() {
		if m.key == spec[:i] {
			return Shape{Name: s, Model: m.name, MemoryMiB: m.memoryMiB, Cards: n}, nil
		}
	}
	return Shape{}, shapeError(s, fmt.Sprintf("unknown MODEL %q", spec[:i]))
}

func shapeError(s, why string) error {
	var models []string
	for _, m := range cardModels() {
		models = append(models, m.key)
	}
	var names []string
	for n := range namedShapes() {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("node shape %q: %s (known machines: %s; MODEL one of %s; e.g. H100x8)", s, why,
		strings.Join(names, ", "), strings.Join(models, ", "))
}

// Hosts are n nodes of the shape named PREFIX-0..PREFIX-(n-1), each card with
// shares shares.
func (sh Shape) Hosts(prefix string, n, shares int) []Host {
	out := make([]Host, n)
	for i := range out {
		name := fmt.Sprintf("%s-%d", prefix, i)
		h := Host{Name: name}
		for c := 0; c < sh.Cards; c++ {
			h.Cards = append(h.Cards, api.Card{UUID: groupCardUUID(name, c), Index: c, Model: sh.Model,
				MemoryMiB: sh.MemoryMiB, NUMA: c * 2 / sh.Cards, Shares: shares, Healthy: true})
		}
		out[i] = h
	}
	return out
}
