package shares

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"volcano.sh/apis/pkg/apis/scheduling"
	vapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/placement/fairshare"
)

// queueInfo is a queue of weight w whose Queue caps card cores at capCores and
// guarantees guaranteeCores (0: neither).
func queueInfo(name string, w int32, capCores, guaranteeCores int64) *vapi.QueueInfo {
	q := &scheduling.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: scheduling.QueueSpec{Weight: w}}
	if capCores > 0 {
		q.Spec.Capability = corev1.ResourceList{api.ResourceCores: *resource.NewQuantity(capCores, resource.DecimalSI)}
	}
	if guaranteeCores > 0 {
		q.Spec.Guarantee.Resource = corev1.ResourceList{api.ResourceCores: *resource.NewQuantity(guaranteeCores, resource.DecimalSI)}
	}
	return &vapi.QueueInfo{UID: vapi.QueueID(name), Name: name, Weight: w, Queue: q}
}

func cores(c float64) fairshare.Amount { return fairshare.Amount{MemoryMiB: 1000 * c, Cores: c} }

// Two queues of weight 3 and 1 asking for more than 800 cores: 600 and 200 deserved.
// heavy holds 700 (above its share), light 100 (below).
func contended(t *testing.T) (*Shares, *vapi.QueueInfo, *vapi.QueueInfo) {
	t.Helper()
	s := New(fairshare.Amount{MemoryMiB: 800000, Cores: 800}, fairshare.Cards{RefMiB: 40960, WholeMiB: 40960}, api.DefaultResourceNames())
	heavy, light := queueInfo("heavy", 3, 0, 0), queueInfo("light", 1, 0, 0)
	s.Hold(heavy, "h-1", cores(700))
	s.Hold(light, "l-1", cores(100))
	s.Ask(heavy, cores(400))
	s.Ask(light, cores(400))
	s.Ask(light, cores(50))
	s.Divide()
	return s, heavy, light
}

func TestStandingsAreTheDivision(t *testing.T) {
	s, _, _ := contended(t)
	got := s.Standings()
	if len(got) != 2 || got[0].Name != "heavy" || got[1].Name != "light" {
		t.Fatalf("standings %+v, want heavy then light", got)
	}
	if got[0].Deserved.Cores != 600 || got[1].Deserved.Cores != 200 || got[0].Allocated.Cores != 700 ||
		got[1].Requested.Cores != 550 {
		t.Errorf("standings %+v, want 600:200 deserved, heavy holding 700, light asking 550", got)
	}
}

func TestWhoMayReclaimAndBeReclaimedFrom(t *testing.T) {
	s, heavy, light := contended(t)
	if !s.AboveShare(heavy.UID) || s.AboveShare(light.UID) || s.AboveShare("unknown") {
		t.Error("AboveShare: want heavy (700 of 600) only")
	}
	if !s.MayReclaim(light.UID, cores(50)) || s.MayReclaim(heavy.UID, cores(50)) || !s.MayReclaim("unknown", cores(50)) {
		t.Error("MayReclaim: want light (below its share) and a queue the shares do not know, not heavy")
	}
	if ok, why := s.Admit(heavy.UID, cores(50)); ok || !strings.Contains(why, "queue heavy is at its share") {
		t.Errorf("Admit(heavy) = %v, %q; want a refusal naming the share", ok, why)
	}
	if ok, _ := s.Admit(light.UID, cores(50)); !ok {
		t.Error("Admit(light): refused below its share")
	}
	if ok, _ := s.Admit(heavy.UID, fairshare.Amount{MemoryMiB: 0, Cores: 0}); !ok {
		t.Error("Admit of a task asking nothing was refused")
	}
}

// A gang's cheapest members are held against the queue's capability (never to be
// met) and against what it is owed (reclaim may take it back for them).
func TestGangsAgainstCapabilityAndEntitlement(t *testing.T) {
	s := New(fairshare.Amount{MemoryMiB: 800000, Cores: 800}, fairshare.Cards{RefMiB: 40960, WholeMiB: 40960}, api.DefaultResourceNames())
	capped, free := queueInfo("capped", 1, 100, 0), queueInfo("free", 1, 0, 0)
	s.Ask(capped, cores(50))
	s.Ask(free, cores(50))
	s.Hold(free, "f-1", cores(100))
	s.Divide()
	costs := []fairshare.Amount{cores(60), cores(30), cores(40)}
	if why := s.BeyondCapability(capped.UID, costs, 2); why != "" {
		t.Errorf("two cheapest (70 cores) beyond a capability of 100: %q", why)
	}
	if why := s.BeyondCapability(capped.UID, costs, 3); !strings.Contains(why, "capability of 100% of card cores is less than the 130%") {
		t.Errorf("three (130 cores) within a capability of 100: %q", why)
	}
	if why := s.BeyondCapability("unknown", costs, 3); why != "" {
		t.Errorf("a queue the shares do not know: %q", why)
	}
	// free deserves the 150 cores it asks and holds 100: it is owed 50.
	if !s.Entitled(free.UID, costs, 1) || s.Entitled(free.UID, costs, 2) || s.Entitled(free.UID, costs, 0) || s.Entitled("unknown", costs, 1) {
		t.Error("Entitled: want free's cheapest member (30) within the 50 it is owed, not two (70), nor anything for no need or an unknown queue")
	}
	if st := s.Standings(); st[0].Deserved.Cores != 50 || st[1].Deserved.Cores != 150 {
		t.Errorf("capped deserves %v cores and free %v, want what each asks: 50 and 150", st[0].Deserved.Cores, st[1].Deserved.Cores)
	}
}

// A queue's guarantee of card cores is a floor under its weighted share.
func TestGuaranteeIsAFloorUnderTheWeight(t *testing.T) {
	s := New(fairshare.Amount{MemoryMiB: 800000, Cores: 800}, fairshare.Cards{RefMiB: 40960, WholeMiB: 40960}, api.DefaultResourceNames())
	s.Ask(queueInfo("heavy", 3, 0, 0), cores(800))
	s.Ask(queueInfo("light", 1, 0, 400), cores(800))
	s.Divide()
	if st := s.Standings(); st[0].Deserved.Cores != 400 || st[1].Deserved.Cores != 400 {
		t.Errorf("deserved %v:%v cores, want 400:400 (light guaranteed 400)", st[0].Deserved.Cores, st[1].Deserved.Cores)
	}
}
