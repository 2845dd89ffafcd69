package kubeletserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/cards"
	"github.com/tessera-gpu/tessera/deviceplugin/discovery"
	"github.com/tessera-gpu/tessera/deviceplugin/handoff"
	"github.com/tessera-gpu/tessera/deviceplugin/kubeletserver"
	"github.com/tessera-gpu/tessera/internal/testing/klogtest"
	"github.com/tessera-gpu/tessera/internal/testing/kubeletsim"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

// unplacedHandler is the handoff's answer for a pod Tessera did not place: no pending
// container to follow, so the server's own fallback chooses. Its Allocate hands out
// whatever the kubelet chose, so that the test sees the kubelet's pick.
type unplacedHandler struct{}

func (unplacedHandler) Preferred(context.Context, *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	return nil, fmt.Errorf("%w: nothing waits", handoff.ErrNoPendingContainer)
}
func (unplacedHandler) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return resp, nil
}
func (unplacedHandler) PreStart(context.Context, []string) error { return nil }

// cordonScene is a registered server on nvmlfake's four cards (0,1 and 2,3 NVLinked
// pairs on two NUMA nodes, two slots each) and a fake kubelet in front of it.
type cordonScene struct {
	ctx     context.Context
	kubelet *kubeletsim.Kubelet
	reg     *cards.Registry
	srv     *kubeletserver.Server
	pods    int
}

func newCordonScene(t *testing.T) *cordonScene {
	t.Helper()
	ctx, k, reg, _, srv := serve(t, 2, kubeletserver.Options{AwaitCordons: true}, unplacedHandler{})
	if err := k.WaitFor(ctx, kubeletsim.RegisteredAtLeast(1)); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitFor(ctx, func(k *kubeletsim.Kubelet) bool { return len(k.Health()) == 8 }); err != nil {
		t.Fatal(err)
	}
	return &cordonScene{ctx: ctx, kubelet: k, reg: reg, srv: srv}
}

func (s *cordonScene) uuid(card int) string { return s.reg.Inventory().Cards[card].UUID }

// observe hands the server the Node as the publisher's write returns it; cordoned
// maps card indices to reasons, raw (when set) is the annotation as written.
func (s *cordonScene) observe(t *testing.T, cordoned map[int]string, raw string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: map[string]string{}}}
	if len(cordoned) > 0 {
		c := &api.NodeCordons{Cards: map[string]api.CardCordon{}}
		for i, reason := range cordoned {
			c.Cards[s.uuid(i)] = api.CardCordon{Reason: reason, Since: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		}
		enc, err := api.EncodeCordons(c)
		if err != nil {
			t.Fatal(err)
		}
		raw = enc
	}
	if raw != "" {
		node.Annotations[api.AnnotationCordonedCards] = raw
	}
	s.srv.ObserveNode(node)
}

// admit has the kubelet admit a pod of one container asking for n cards and returns
// the card indices of the slots it was given, in slot order.
func (s *cordonScene) admit(n int) ([]int, error) {
	s.pods++
	name := fmt.Sprintf("unplaced-%d", s.pods)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID(name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{api.ResourceNumber: *resource.NewQuantity(int64(n), resource.DecimalSI)}}}}}}
	got, err := s.kubelet.Admit(s.ctx, pod)
	s.kubelet.Release(pod.UID)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, id := range got["main"].IDs {
		uuid, _, err := cards.ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		for i, c := range s.reg.Inventory().Cards {
			if c.UUID == uuid {
				out = append(out, i)
			}
		}
	}
	return out, nil
}

// For a pod with no assignment to follow the server chooses the slots itself; the
// kubelet admits with what it prefers. It never prefers a cordoned card while
// uncordoned ones can serve, and says which cards are cordoned, and why, when they
// cannot.
func TestTheFallbackPreferenceKeepsOffCordonedCards(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cordoned  map[int]string
		raw       string // the annotation as written, when not encoded from cordoned
		size      int
		wantCards string
		wantErr   []string // "%s" stands for card 0's UUID
	}{
		{"without cordons a pair gets the first NVLinked pair", nil, "", 2, "0,1", nil},
		{"a pair avoids the NVLinked pair whose card is cordoned", map[int]string{0: "ECC errors"}, "", 2, "2,3", nil},
		{"one card avoids the cordoned card", map[int]string{0: "ECC errors"}, "", 1, "1", nil},
		{"three cards take the three uncordoned ones", map[int]string{2: "fan"}, "", 3, "0,1,3", nil},
		{"a cordon of a card the node does not have changes nothing",
			nil, `{"version":"v1","cards":{"GPU-gone":{"since":"2026-03-01T12:00:00Z"}}}`, 2, "0,1", nil},
		{"too few uncordoned cards are refused naming the cordoned card and its reason", map[int]string{0: "ECC errors"}, "", 4, "",
			[]string{"4 slots on distinct cards wanted, 3 uncordoned cards have a free slot", "card %s is cordoned: ECC errors"}},
		{"an annotation that does not decode counts every card as cordoned", nil, `{"version":"v1","cards":{"%s":{"since":"yesterday"}}}`, 1, "",
			[]string{"every card counts as cordoned", `"yesterday" is not an RFC 3339 time`}},
		{"a newer version counts every card as cordoned", nil, `{"version":"v2","cards":{}}`, 1, "",
			[]string{"every card counts as cordoned", `version "v2"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCordonScene(t)
			raw := tc.raw
			if strings.Contains(raw, "%s") {
				raw = fmt.Sprintf(raw, s.uuid(0))
			}
			s.observe(t, tc.cordoned, raw)
			got, err := s.admit(tc.size)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("admitted on cards %v; want a refusal", got)
				}
				for _, w := range tc.wantErr {
					if strings.Contains(w, "%s") {
						w = fmt.Sprintf(w, s.uuid(0))
					}
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := joinInts(got); s != tc.wantCards {
				t.Fatalf("admitted on cards %s, want %s", s, tc.wantCards)
			}
		})
	}
}

// The cordons follow the Node: a card cordoned later is avoided from the next copy of
// the Node on, and an uncordoned card serves again. Until a first copy arrives no card
// is known to be uncordoned, so none is preferred.
func TestTheFallbackFollowsCordonsAsTheNodeChanges(t *testing.T) {
	s := newCordonScene(t)
	steps := []struct {
		name      string
		cordoned  map[int]string
		wantCards string
		wantErr   string
	}{
		{"before the node is read nothing is preferred", nil, "", "cordons (tessera.io/cordoned-cards) are not read yet"},
		{"card 1 cordoned sends a pair to 2,3", map[int]string{1: "drain"}, "2,3", ""},
		{"card 1 uncordoned and card 3 cordoned sends it back to 0,1", map[int]string{3: "drain"}, "0,1", ""},
		{"the cordon removed leaves every card usable", map[int]string{}, "0,1", ""},
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if i > 0 {
				s.observe(t, st.cordoned, "")
			}
			got, err := s.admit(2)
			switch {
			case st.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), st.wantErr) {
					t.Fatalf("got cards %v, err %v; want a refusal saying %q", got, err, st.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case joinInts(got) != st.wantCards:
				t.Fatalf("admitted on cards %v, want %s", got, st.wantCards)
			}
		})
	}
}

// A bad annotation stays on the Node across heartbeats: it is logged when it first
// arrives, not on every copy of the Node.
func TestAnUndecodableCordonIsLoggedOnce(t *testing.T) {
	res, err := discovery.Discover(nvmlfake.FourCardsTwoNUMA(), discovery.Options{Shares: 2})
	if err != nil {
		t.Fatal(err)
	}
	reg := cards.NewRegistry(res.Cards(), res.Links)
	// Not started: only ObserveNode logs while the output is captured.
	s := &cordonScene{reg: reg, srv: kubeletserver.New(kubeletserver.Options{}, reg, unplacedHandler{})}
	logs := klogtest.Capture(t, 0)
	for i := 0; i < 3; i++ {
		s.observe(t, nil, `{"version":"v2"}`)
	}
	klog.Flush()
	if n := strings.Count(logs.String(), "cordons do not decode"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs)
	}
	s.observe(t, nil, `{"version":"v3"}`)
	klog.Flush()
	if n := strings.Count(logs.String(), "cordons do not decode"); n != 2 {
		t.Fatalf("a different bad value logged %d times in all, want twice:\n%s", n, logs)
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
