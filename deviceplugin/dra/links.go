package dra

import (
	"fmt"

	"github.com/tessera-gpu/tessera/api"
)

// LinkDomains names, for each card, the set of cards it reaches over NVLink, directly or
// through other cards (an NVSwitch puts every attached card in one set). A set of two or
// more cards is "nvlink-<lowest index>"; a card without an NVLink peer is alone in
// "single-<index>". Claims ask for linked cards with a matchAttribute constraint on
// linkDomain. links is the discovery matrix (links[i][j] between cards[i] and cards[j]);
// a matrix of the wrong shape, which discovery never produces, links nothing.
func LinkDomains(cards []api.Card, links [][]api.LinkType) []string {
	n := len(cards)
	linked := func(i, j int) bool {
		if len(links) != n || len(links[i]) != n || len(links[j]) != n {
			return false
		}
		_, a := links[i][j].NVLinks()
		_, b := links[j][i].NVLinks()
		return a || b
	}
	// Union-find over positions; the root of a set is its member with the lowest index.
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	size := make([]int, n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if !linked(i, j) {
				continue
			}
			a, b := find(i), find(j)
			if a == b {
				continue
			}
			if cards[b].Index < cards[a].Index {
				a, b = b, a
			}
			parent[b] = a
		}
	}
	for i := range cards {
		size[find(i)]++
	}
	out := make([]string, n)
	for i, c := range cards {
		r := find(i)
		if size[r] > 1 {
			out[i] = fmt.Sprintf("nvlink-%d", cards[r].Index)
		} else {
			out[i] = fmt.Sprintf("single-%d", c.Index)
		}
	}
	return out
}
