package placement

import "github.com/tessera-gpu/tessera/api"

// ClassCounts counts a card's shared tenants per QoS class, indexed by classIndex.
// Counts rather than a flag, so that releasing one tenant of a card that (through
// pods accounted from before the rule) hosts two classes leaves the other in place.
type ClassCounts [3]int32

// qosClasses is the index order of ClassCounts.
var qosClasses = [3]api.QoSClass{api.QoSBestEffort, api.QoSFixedShare, api.QoSBurstShare}

// classIndex is c's slot in ClassCounts; the empty class is the default one, and an
// unknown class (never produced by api.ParseQoSClass) has none.
func classIndex(c api.QoSClass) int {
	if c == "" {
		c = api.DefaultQoS
	}
	for i, k := range qosClasses {
		if k == c {
			return i
		}
	}
	return -1
}

func (c *ClassCounts) add(d ClassCounts) {
	for i := range c {
		c[i] += d[i]
	}
}

func (c *ClassCounts) sub(d ClassCounts) {
	for i := range c {
		c[i] = max(0, c[i]-d[i])
	}
}

func (c ClassCounts) covers(d ClassCounts) bool {
	for i := range c {
		if d[i] > c[i] {
			return false
		}
	}
	return true
}

// Other returns a class other than q that the card hosts, if any: the reason a
// shared task of class q may not join the card.
func (c ClassCounts) Other(q api.QoSClass) (api.QoSClass, bool) {
	own := classIndex(q)
	for i, n := range c {
		if n > 0 && i != own {
			return qosClasses[i], true
		}
	}
	return "", false
}

// tenantUsage is what one container's share of a card books. Exclusive tenants
// (100% cores) sit outside the QoS pools: they hold the card alone anyway.
func tenantUsage(a api.CardAssignment, t Tenancy) Usage {
	u := Usage{MemoryMiB: a.MemoryMiB, Cores: a.Cores, Tenants: 1}
	if i := classIndex(t.QoS); i >= 0 && a.Cores < 100 {
		u.Classes[i] = 1
	}
	if t.IdleOnly {
		u.IdleOnly = 1
	}
	return u
}

// checkQoS keeps shared cards in one service class: a card that hosts shared
// tasks of another class refuses a shared task; an idle card takes any class, and
// an exclusive request is outside the rule (it needs an idle card anyway).
func checkQoS(c *CardState, used Usage, cr *api.ContainerRequest, o *api.PodOptions, r *CardReject) bool {
	if cr.Exclusive() {
		return false
	}
	other, ok := used.Classes.Other(o.QoS)
	if !ok {
		return false
	}
	want := o.QoS
	if want == "" {
		want = api.DefaultQoS
	}
	*r = CardReject{Index: c.Index, UUID: c.UUID, Reason: ReasonQoS,
		why: rejectDetail{kind: detailQoS, text: string(other), text2: string(want)}}
	return true
}
