package book

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
)

func TestInFlightStoreForgetsSettledPods(t *testing.T) {
	s := NewInFlight()
	now := time.Now()
	a := &api.PodAssignment{}
	for _, uid := range []string{"gone", "unplaced", "flying", "confirmed", "old", "rolled-back"} {
		s.Put(types.UID(uid), a, now)
	}
	s.Delete("rolled-back")
	s.entries["old"] = inFlightEntry{assignment: a, created: now.Add(-time.Hour)}
	views := map[string]PodView{"unplaced": PodUnplaced, "flying": PodInFlight, "confirmed": PodConfirmed, "old": PodInFlight}
	dropped := s.Reconcile(func(uid types.UID) PodView { return views[string(uid)] }, now, 10*time.Minute)
	if dropped != 4 || s.Len() != 1 {
		t.Fatalf("dropped %d, kept %d; want only the in-flight, young entry kept", dropped, s.Len())
	}
	if _, ok := s.Get("flying"); !ok {
		t.Fatal("the in-flight entry was dropped")
	}
}
