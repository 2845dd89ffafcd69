package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/tessera-gpu/tessera/api"
)

// Per-card cordons: the decisions are pure functions over the node's inventory and
// its api.NodeCordons; patchCordons writes the result back without losing another
// writer's change.

// errNoCard is wrapped when a CARD argument names no card of the node.
var errNoCard = errors.New("no such card")

// nodeCards reads the cards a node publishes, Tessera's inventory or HAMi's
// registration, without the scheduler's heartbeat and cordon checks: an operator
// cordons or drains the cards of a node whose agent is gone too.
func nodeCards(node *corev1.Node) (*api.NodeInventory, error) {
	if s, ok := node.Annotations[api.AnnotationInventory]; ok {
		return api.DecodeInventory(s)
	}
	if s, ok := node.Annotations[api.VolcanoNodeRegister]; ok {
		cards, err := api.DecodeVolcanoNodeRegister(s)
		if err != nil {
			return nil, err
		}
		return api.InventoryFromVolcano(cards), nil
	}
	return nil, fmt.Errorf("node %s publishes no vGPU cards (neither %s nor %s)", node.Name, api.AnnotationInventory, api.VolcanoNodeRegister)
}

// resolveCards finds each CARD argument among the node's cards: an index as `nodes`
// shows it, or a UUID. Each card is returned once, in the order first named.
func resolveCards(node string, inv *api.NodeInventory, args []string) ([]api.Card, error) {
	var out []api.Card
	seen := map[string]bool{}
	for _, a := range args {
		i := cardIndex(inv, a)
		if i < 0 {
			var have []string
			for _, c := range inv.Cards {
				have = append(have, strconv.Itoa(c.Index)+" "+c.UUID)
			}
			return nil, fmt.Errorf("%w: node %s has no card %q (its cards: %s)", errNoCard, node, a, strings.Join(have, ", "))
		}
		if c := inv.Cards[i]; !seen[c.UUID] {
			seen[c.UUID] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// cardIndex is the position in inv of the card a names, by index or UUID; -1: none.
func cardIndex(inv *api.NodeInventory, a string) int {
	n, err := strconv.Atoi(a)
	for i, c := range inv.Cards {
		if c.UUID == a || err == nil && c.Index == n {
			return i
		}
	}
	return -1
}

// currentCordons reads the node's cordons; none when the annotation is absent. One the
// codec refuses is an error telling how to remove it: the tool will not guess which
// cards it meant.
func currentCordons(node *corev1.Node) (*api.NodeCordons, error) {
	s, ok := node.Annotations[api.AnnotationCordonedCards]
	if !ok {
		return &api.NodeCordons{Version: api.CordonsVersion, Cards: map[string]api.CardCordon{}}, nil
	}
	c, err := api.DecodeCordons(s)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w; fix it, or remove it with: kubectl annotate node %s %s-", node.Name, err, node.Name, api.AnnotationCordonedCards)
	}
	return c, nil
}

// cardChange is what cordon or uncordon did, or would do, to one card.
type cardChange struct {
	card api.Card
	// was is the card's cordon before, now after; nil: not cordoned.
	was, now *api.CardCordon
}

func (c cardChange) String() string {
	name := fmt.Sprintf("card %d (%s)", c.card.Index, c.card.UUID)
	why := func(cc *api.CardCordon) string {
		if cc.Reason == "" {
			return ""
		}
		return ": " + cc.Reason
	}
	switch {
	case c.was == nil && c.now != nil:
		return name + " cordoned" + why(c.now)
	case c.was != nil && c.now == nil:
		return name + " uncordoned"
	case c.was == nil:
		return name + " was not cordoned"
	case c.was.Reason != c.now.Reason:
		return name + " cordoned since " + c.was.Since.Format(time.RFC3339) + ", reason now" + why(c.now)
	}
	return name + " already cordoned since " + c.now.Since.Format(time.RFC3339) + why(c.now)
}

// cordonCards cordons the cards in cur's copy: a card already cordoned keeps its time,
// and its reason unless setReason gives a new one.
func cordonCards(cur *api.NodeCordons, cards []api.Card, reason string, setReason bool, now time.Time) (*api.NodeCordons, []cardChange) {
	next := copyCordons(cur)
	var changes []cardChange
	for _, c := range cards {
		ch := cardChange{card: c}
		if was, ok := next.Cards[c.UUID]; ok {
			ch.was = &was
			if setReason {
				next.Cards[c.UUID] = api.CardCordon{Reason: reason, Since: was.Since}
			}
		} else {
			next.Cards[c.UUID] = api.CardCordon{Reason: reason, Since: now.UTC().Truncate(time.Second)}
		}
		cc := next.Cards[c.UUID]
		ch.now = &cc
		changes = append(changes, ch)
	}
	return next, changes
}

// uncordonCards lifts the cards' cordons in cur's copy.
func uncordonCards(cur *api.NodeCordons, cards []api.Card) (*api.NodeCordons, []cardChange) {
	next := copyCordons(cur)
	var changes []cardChange
	for _, c := range cards {
		ch := cardChange{card: c}
		if was, ok := next.Cards[c.UUID]; ok {
			ch.was = &was
			delete(next.Cards, c.UUID)
		}
		changes = append(changes, ch)
	}
	return next, changes
}

func copyCordons(c *api.NodeCordons) *api.NodeCordons {
	out := &api.NodeCordons{Version: api.CordonsVersion, Cards: make(map[string]api.CardCordon, len(c.Cards))}
	for k, v := range c.Cards {
		out.Cards[k] = v
	}
	return out
}

// cordonPatch is the JSON merge patch that sets the node's cordons, or removes the
// annotation when none is left, guarded by the resourceVersion the change was computed
// from: the API server refuses it with a Conflict if the node changed since.
func cordonPatch(resourceVersion string, next *api.NodeCordons) ([]byte, error) {
	var value any // null removes the annotation
	if len(next.Cards) > 0 {
		s, err := api.EncodeCordons(next)
		if err != nil {
			return nil, err
		}
		value = s
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion,
		"annotations":     map[string]any{api.AnnotationCordonedCards: value},
	}})
}

// changeCordons reads the node, lets change decide the next cordons from its cards and
// current cordons, and patches them on when they differ; on a Conflict (someone wrote
// the node meanwhile) it reads the node again and decides again. dryRun decides only.
func changeCordons(ctx context.Context, client kubernetes.Interface, name string, dryRun bool,
	change func(inv *api.NodeInventory, cur *api.NodeCordons) (*api.NodeCordons, []cardChange, error)) ([]cardChange, error) {
	var changes []cardChange
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		inv, err := nodeCards(node)
		if err != nil {
			return err
		}
		cur, err := currentCordons(node)
		if err != nil {
			return err
		}
		next, chs, err := change(inv, cur)
		if err != nil {
			return err
		}
		changes = chs
		if dryRun || sameCordons(cur, next) {
			return nil
		}
		patch, err := cordonPatch(node.ResourceVersion, next)
		if err != nil {
			return err
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return changes, nil
}

func sameCordons(a, b *api.NodeCordons) bool {
	if len(a.Cards) != len(b.Cards) {
		return false
	}
	for k, v := range a.Cards {
		if w, ok := b.Cards[k]; !ok || w.Reason != v.Reason || !w.Since.Equal(v.Since) {
			return false
		}
	}
	return true
}
