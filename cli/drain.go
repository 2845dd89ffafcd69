package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
)

// drainPoll is how often drain retries an eviction a PodDisruptionBudget refused and
// looks whether the evicted pods are gone.
var drainPoll = 2 * time.Second

// drainVictim is a pod holding one of the drained cards.
type drainVictim struct {
	namespace, name string
	uid             types.UID
	// cards are the drained cards it holds, as "index (UUID)".
	cards []string
	// terminating: already being deleted, so drain only waits for it.
	terminating bool
}

func (v drainVictim) String() string { return v.namespace + "/" + v.name }

// drainVictims picks, of the pods bound to node, those whose assignment holds one of
// the cards; the pods whose cards cannot be read are named in unreadable, not evicted.
func drainVictims(pods []corev1.Pod, node string, cards []api.Card, names api.ResourceNames) (victims []drainVictim, unreadable []string) {
	drained := map[string]string{}
	for _, c := range cards {
		drained[c.UUID] = fmt.Sprintf("%d (%s)", c.Index, c.UUID)
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !names.HasVGPURequest(p) {
			continue
		}
		a, err := api.ReadPodAssignment(p, names)
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, err))
			continue
		}
		held := map[string]bool{}
		for _, c := range a.Containers {
			for _, ca := range c.Cards {
				if d, ok := drained[ca.UUID]; ok {
					held[d] = true
				}
			}
		}
		if len(held) == 0 {
			continue
		}
		v := drainVictim{namespace: p.Namespace, name: p.Name, uid: p.UID, terminating: p.DeletionTimestamp != nil}
		for d := range held {
			v.cards = append(v.cards, d)
		}
		sort.Strings(v.cards)
		victims = append(victims, v)
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].String() < victims[j].String() })
	return victims, unreadable
}

// evictOutcome is what one eviction request came to.
type evictOutcome int

const (
	evictAccepted evictOutcome = iota // the API server is deleting the pod
	evictBlocked                      // a PodDisruptionBudget refused it for now (429)
	evictGone                         // the pod was gone already
	evictFailed                       // any other error
)

// classifyEviction sorts an Eviction API answer.
func classifyEviction(err error) evictOutcome {
	switch {
	case err == nil:
		return evictAccepted
	case apierrors.IsNotFound(err):
		return evictGone
	case apierrors.IsTooManyRequests(err):
		return evictBlocked
	}
	return evictFailed
}

// drainer evicts the victims through the Eviction API (so PodDisruptionBudgets hold)
// and waits until they are gone or the deadline passes, saying what it does on out.
// Each victim is evicted and waited for on its own, so that one a budget holds does not
// hold up the others (client-go itself waits out a Retry-After the API server sends).
type drainer struct {
	client   kubernetes.Interface
	deadline time.Time
	// mu guards out.
	mu  sync.Mutex
	out io.Writer
}

func (d *drainer) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format+"\n", args...)
}

// drain returns an error naming every victim left on the cards, and why.
func (d *drainer) drain(ctx context.Context, victims []drainVictim) error {
	ctx, cancel := context.WithDeadline(ctx, d.deadline)
	defer cancel()
	left := make([]string, len(victims))
	var wg sync.WaitGroup
	for i, v := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			left[i] = d.drainOne(ctx, v)
		}()
	}
	wg.Wait()
	var why []string
	for _, l := range left {
		if l != "" {
			why = append(why, l)
		}
	}
	if len(why) > 0 {
		return fmt.Errorf("%d of %d pods left on the cards: %s", len(why), len(victims), strings.Join(why, "; "))
	}
	return nil
}

// drainOne evicts one victim and waits until it is gone; "" when it is, else what is
// left undone.
func (d *drainer) drainOne(ctx context.Context, v drainVictim) string {
	if v.terminating {
		d.say("%s is terminating already; waiting for it", v)
	} else if left, gone := d.evict(ctx, v); left != "" || gone {
		return left
	}
	for {
		p, err := d.client.CoreV1().Pods(v.namespace).Get(ctx, v.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && p.UID != v.uid:
			d.say("%s is gone", v)
			return ""
		case ctx.Err() != nil:
			return fmt.Sprintf("%s: evicted, not gone by %s", v, stopped(ctx))
		case err != nil:
			return fmt.Sprintf("%s: evicted; cannot tell whether it is gone: %v", v, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(drainPoll):
		}
	}
}

// evict asks the Eviction API until it accepts (gone false) or finds the pod gone
// (gone true); left says why it stopped otherwise.
func (d *drainer) evict(ctx context.Context, v drainVictim) (left string, gone bool) {
	var refusal error // the last refusal, to quote when the time is up
	for {
		err := d.client.PolicyV1().Evictions(v.namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Namespace: v.namespace, Name: v.name},
			// Only the pod drain chose: a pod of the same name made since is left alone.
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.uid}}})
		switch outcome := classifyEviction(err); {
		case outcome == evictAccepted:
			d.say("evicting %s (card %s)", v, strings.Join(v.cards, ", card "))
			return "", false
		case outcome == evictGone:
			d.say("%s is gone", v)
			return "", true
		case ctx.Err() != nil:
			if refusal == nil || outcome == evictBlocked {
				refusal = err
			}
			// client-go waits out a Retry-After itself (the API server sends one while
			// it processes a new budget): the error may say only that time ran out.
			return fmt.Sprintf("%s: not evicted, refused or told to retry later until %s: %v", v, stopped(ctx), refusal), false
		case outcome == evictFailed:
			return fmt.Sprintf("%s: could not evict: %v", v, err), false
		case refusal == nil:
			d.say("%s: eviction refused for now (a PodDisruptionBudget), retrying: %v", v, err)
			fallthrough
		default:
			refusal = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(drainPoll):
		}
	}
}

// stopped says why the drain stopped waiting: its timeout, or its caller.
func stopped(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "the timeout"
	}
	return "the drain was stopped"
}

// podsOnNode lists the pods bound to the node, in every namespace.
func podsOnNode(ctx context.Context, client kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	return l.Items, nil // drainVictims checks the node again: fake clientsets ignore field selectors
}

// cardList names cards for a summary line: "1, 3".
func cardList(cards []api.Card) string {
	parts := make([]string, len(cards))
	for i, c := range cards {
		parts[i] = strconv.Itoa(c.Index)
	}
	return strings.Join(parts, ", ")
}
