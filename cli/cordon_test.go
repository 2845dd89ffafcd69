package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tessera-gpu/tessera/api"
)

// cardEnv is testEnv with the fake clientset at hand, for reactors and for reading
// back what a command wrote.
func cardEnv(t *testing.T, objs ...runtime.Object) (Env, *fake.Clientset, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errOut bytes.Buffer
	client := fake.NewSimpleClientset(objs...)
	env := Env{Stdout: &out, Stderr: &errOut, Now: func() time.Time { return now },
		Client: func(string, *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			return client, "team-a", nil
		}}
	return env, client, &out, &errOut
}

func runCard(t *testing.T, env Env, command string, args ...string) error {
	t.Helper()
	return Run(context.Background(), env, command, args)
}

// cordonsOn reads back the node's cordons; nil when the annotation is absent.
func cordonsOn(t *testing.T, client kubernetes.Interface, node string) *api.NodeCordons {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := n.Annotations[api.AnnotationCordonedCards]
	if !ok {
		return nil
	}
	c, err := api.DecodeCordons(s)
	if err != nil {
		t.Fatalf("the command wrote a value the scheduler cannot read: %v", err)
	}
	return c
}

func TestCardArgumentsAreIndexesOrUUIDs(t *testing.T) {
	inv := &api.NodeInventory{Cards: []api.Card{card("GPU-a0", 0, "A100", 1), card("GPU-a1", 1, "A100", 1)}}
	for _, tc := range []struct {
		name string
		args []string
		want []string // UUIDs; nil: an error containing err
		err  string
	}{
		{"an index as nodes shows it", []string{"1"}, []string{"GPU-a1"}, ""},
		{"a UUID", []string{"GPU-a0"}, []string{"GPU-a0"}, ""},
		{"a card named twice is one card", []string{"0", "GPU-a0", "1"}, []string{"GPU-a0", "GPU-a1"}, ""},
		{"an index the node lacks lists its cards", []string{"7"}, nil, `node gpu-a has no card "7" (its cards: 0 GPU-a0, 1 GPU-a1)`},
		{"a UUID of another node", []string{"GPU-b0"}, nil, `no card "GPU-b0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cards, err := resolveCards("gpu-a", inv, tc.args)
			if tc.want == nil {
				if err == nil || !errors.Is(err, errNoCard) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			var got []string
			for _, c := range cards {
				got = append(got, c.UUID)
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("resolved %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// A cordon keeps its time; its reason changes only when a new one is given; uncordon
// lifts only the cards named; the patch carries the resourceVersion it was computed
// from, and removes the annotation when no card is left.
func TestCordonDecisions(t *testing.T) {
	a0, a1 := card("GPU-a0", 0, "A100", 1), card("GPU-a1", 1, "A100", 1)
	earlier := now.Add(-time.Hour)
	cur := &api.NodeCordons{Version: api.CordonsVersion, Cards: map[string]api.CardCordon{"GPU-a0": {Reason: "fan", Since: earlier}}}
	next, changes := cordonCards(cur, []api.Card{a0, a1}, "", false, now)
	if got := next.Cards["GPU-a0"]; got.Reason != "fan" || !got.Since.Equal(earlier) {
		t.Errorf("the cordoned card became %+v, want its reason and time kept", got)
	}
	if got := next.Cards["GPU-a1"]; got.Reason != "" || !got.Since.Equal(now) {
		t.Errorf("the new cordon is %+v, want now without a reason", got)
	}
	if len(cur.Cards) != 1 {
		t.Error("cordonCards changed the cordons it was given")
	}
	wantText := []string{"card 0 (GPU-a0) already cordoned since " + earlier.Format(time.RFC3339) + ": fan", "card 1 (GPU-a1) cordoned"}
	for i, c := range changes {
		if c.String() != wantText[i] {
			t.Errorf("change %d reads %q, want %q", i, c, wantText[i])
		}
	}
	next, changes = cordonCards(cur, []api.Card{a0}, "RMA", true, now)
	if got := next.Cards["GPU-a0"]; got.Reason != "RMA" || !got.Since.Equal(earlier) || !strings.Contains(changes[0].String(), "reason now: RMA") {
		t.Errorf("a new reason gave %+v (%s), want RMA since the first cordon", got, changes[0])
	}
	next, changes = uncordonCards(cur, []api.Card{a0, a1})
	if len(next.Cards) != 0 || changes[0].String() != "card 0 (GPU-a0) uncordoned" || changes[1].String() != "card 1 (GPU-a1) was not cordoned" {
		t.Errorf("uncordon left %v, said %v", next.Cards, changes)
	}
	patch, err := cordonPatch("42", next)
	if err != nil || string(patch) != `{"metadata":{"annotations":{"tessera.io/cordoned-cards":null},"resourceVersion":"42"}}` {
		t.Errorf("patch %s (%v), want the annotation removed under resourceVersion 42", patch, err)
	}
}

func TestCordonAndUncordonWriteTheAnnotation(t *testing.T) {
	env, client, out, _ := cardEnv(t, cluster(t)...)
	if err := runCard(t, env, "cordon", "gpu-a", "1", "GPU-a0", "--reason", "ECC errors, RMA #4411"); err != nil {
		t.Fatal(err)
	}
	c := cordonsOn(t, client, "gpu-a")
	if c == nil || len(c.Cards) != 2 || c.Cards["GPU-a1"].Reason != "ECC errors, RMA #4411" || !c.Cards["GPU-a1"].Since.Equal(now) {
		t.Fatalf("cordons %+v, want both cards, with the reason, since now", c)
	}
	if want := "gpu-a: card 1 (GPU-a1) cordoned: ECC errors, RMA #4411\ngpu-a: card 0 (GPU-a0) cordoned: ECC errors, RMA #4411\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out, want)
	}
	out.Reset()
	if err := runCard(t, env, "uncordon", "gpu-a", "0"); err != nil {
		t.Fatal(err)
	}
	if c := cordonsOn(t, client, "gpu-a"); c == nil || len(c.Cards) != 1 || c.Cards["GPU-a1"].Reason == "" {
		t.Fatalf("after uncordon 0: %+v, want card 1 alone", c)
	}
	if err := runCard(t, env, "uncordon", "gpu-a", "GPU-a1"); err != nil {
		t.Fatal(err)
	}
	if c := cordonsOn(t, client, "gpu-a"); c != nil {
		t.Errorf("no card cordoned, and the annotation is still there: %+v", c)
	}
	if !strings.Contains(out.String(), "gpu-a: card 0 (GPU-a0) uncordoned") {
		t.Errorf("printed %q", out)
	}
	// A HAMi node's cards are named and cordoned alike.
	if err := runCard(t, env, "cordon", "gpu-b", "0"); err != nil || cordonsOn(t, client, "gpu-b") == nil {
		t.Errorf("cordon of a HAMi node's card: %v", err)
	}
}

// Another writer changed the node between the read and the patch: the API server
// refuses the patch (its resourceVersion is stale), and cordon reads the node again and
// patches what it finds now, keeping the other writer's cordon.
func TestCordonRetriesOnAConflictWithoutLosingTheOtherWrite(t *testing.T) {
	objs := cluster(t)
	objs[0].(*corev1.Node).ResourceVersion = "7"
	env, client, _, _ := cardEnv(t, objs...)
	var patches []string
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
		if len(patches) > 1 {
			return false, nil, nil
		}
		// Someone cordons card 0 meanwhile.
		n, _ := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", "gpu-a")
		node := n.(*corev1.Node).DeepCopy()
		node.ResourceVersion = "8"
		node.Annotations[api.AnnotationCordonedCards] = `{"version":"v1","cards":{"GPU-a0":{"reason":"fan","since":"2026-03-01T11:00:00Z"}}}`
		if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, node, ""); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "gpu-a", errors.New("the object has been modified"))
	})
	if err := runCard(t, env, "cordon", "gpu-a", "1", "--reason", "ECC"); err != nil {
		t.Fatal(err)
	}
	if len(patches) != 2 || !strings.Contains(patches[0], `"resourceVersion":"7"`) || !strings.Contains(patches[1], `"resourceVersion":"8"`) {
		t.Fatalf("patches %q, want two, each guarded by the resourceVersion it read", patches)
	}
	if c := cordonsOn(t, client, "gpu-a"); c == nil || c.Cards["GPU-a0"].Reason != "fan" || c.Cards["GPU-a1"].Reason != "ECC" {
		t.Errorf("cordons %+v, want the other writer's card 0 and this one's card 1", c)
	}
}

func TestCardCommandsRefuseWhatTheyCannotDo(t *testing.T) {
	bad := tesseraNode(t, "gpu-x", now, card("GPU-x0", 0, "A100", 40960))
	bad.Annotations[api.AnnotationCordonedCards] = `{"version":"v1","cards":{"GPU-x0":{"reason":"fan"}}}`
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"cordon", "gpu-a"}, true, "cordon takes a node and at least one card"},
		{[]string{"cordon", "gpu-a", "0", "--reason", "two\nlines"}, true, `--reason "two\nlines" contains a control character`},
		{[]string{"cordon", "gpu-a", "0", "-o", "json"}, true, "cordon prints what it did as text"},
		{[]string{"drain", "gpu-a", "0", "--timeout", "0s"}, true, "--timeout 0s"},
		{[]string{"cordon", "gpu-a", "9"}, false, `node gpu-a has no card "9"`},
		{[]string{"cordon", "cpu-1", "0"}, false, "node cpu-1 publishes no vGPU cards"},
		{[]string{"cordon", "nowhere", "0"}, false, `nodes "nowhere" not found`},
		{[]string{"uncordon", "gpu-x", "0"}, false, `cards["GPU-x0"].since: missing; fix it, or remove it with: kubectl annotate node gpu-x tessera.io/cordoned-cards-`},
	} {
		env, _, _, _ := cardEnv(t, append(cluster(t), bad)...)
		err := runCard(t, env, tc.args[0], tc.args[1:]...)
		if err == nil || errors.Is(err, ErrUsage) != tc.usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v (usage %v), want %q (usage %v)", tc.args, err, errors.Is(err, ErrUsage), tc.want, tc.usage)
		}
	}
}

// nodes shows a cordoned card and its reason, in the table and in the versioned
// object; a node whose annotation cannot be read is unusable with the reason; explain
// names the cordon card by card.
func TestNodesAndExplainShowCordons(t *testing.T) {
	objs := cluster(t)
	objs[0].(*corev1.Node).Annotations[api.AnnotationCordonedCards] = `{"version":"v1","cards":{"GPU-a0":{"reason":"ECC errors","since":"2026-03-01T11:00:00Z"}}}`
	objs[4].(*corev1.Node).Annotations[api.AnnotationCordonedCards] = `{"version":"v2","cards":{}}`
	out := mustRun(t, objs, "nodes")
	for _, want := range []string{"cordoned: ECC errors", "gpu-sick", `unusable`, `tessera.io/cordoned-cards: version "v2" (this build reads "v1")`} {
		if !strings.Contains(out, want) {
			t.Errorf("nodes table lacks %q:\n%s", want, out)
		}
	}
	var list NodeCardsList
	if err := json.Unmarshal([]byte(mustRun(t, objs, "nodes", "gpu-a", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	cards := list.Items[0].Cards
	if c := cards[0].Cordon; c == nil || c.Reason != "ECC errors" || c.Since != "2026-03-01T11:00:00Z" || cards[1].Cordon != nil {
		t.Errorf("cordons in JSON: %+v and %+v, want card 0's alone", cards[0].Cordon, cards[1].Cordon)
	}
	if raw := mustRun(t, objs, "nodes", "gpu-a", "-o", "json"); strings.Count(raw, `"cordon"`) != 1 {
		t.Errorf("an uncordoned card carries a cordon field:\n%s", raw)
	}
	ex := mustRun(t, objs, "explain", "small")
	if !strings.Contains(ex, "card 0 (GPU-a0): cordoned: ECC errors") {
		t.Errorf("explain does not name the cordon per card:\n%s", ex)
	}
	if got := cardHealth(CardView{Healthy: false, Cordon: &CordonView{Reason: strings.Repeat("é", 50)}}); got != "UNHEALTHY,cordoned: "+strings.Repeat("é", 39)+"…" {
		t.Errorf("a long reason's cell is %q", got)
	}
}
