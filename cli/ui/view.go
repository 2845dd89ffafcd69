package ui

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tessera-gpu/tessera/cli"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// View is the page's data, as /api/view serves it: the card map the CLI's report
// draws, the queues' card shares and what waits for cards.
type View struct {
	// Version grows by one each time the data changes; the page fetches on a new one.
	Version   uint64 `json:"version"`
	Generated string `json:"generated"`
	// Cards is `tessera report`'s card map: nodes, cards, their tenants, totals, queue colours.
	Cards CardMap `json:"cards"`
	// Queues are Volcano's queues with their card shares (none without Volcano's API).
	Queues []QueueShare `json:"queues"`
	// QueueShare is the scheduler's vgpu.QueueShare: off, the shares are not enforced.
	QueueShare bool      `json:"queueShare"`
	Pending    []Pending `json:"pending"`
	// Unread says what the account may not read and what the page lacks for it.
	Unread []string `json:"unread,omitempty"`
}

// contents is one reading of the cluster cache.
type contents struct {
	nodes     []*corev1.Node
	pods      []*corev1.Pod
	queues    []*unstructured.Unstructured
	podGroups []*unstructured.Unstructured
}

// buildView computes the page from the cache's contents with the CLI's own views:
// the same reading rules and placement maths as the scheduler plugin.
func buildView(in *contents, args pluginargs.Args, now time.Time, unread []string) *View {
	snap := &cli.Snapshot{Args: args, Now: now, Unread: unread}
	for _, n := range in.nodes {
		snap.Nodes = append(snap.Nodes, *n)
	}
	for _, p := range in.pods {
		// The informer's field selector leaves finished pods out; a fake client does not.
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			snap.Pods = append(snap.Pods, *p)
		}
	}
	sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].Name < snap.Nodes[j].Name })
	sort.Slice(snap.Pods, func(i, j int) bool {
		a, b := &snap.Pods[i], &snap.Pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	queues := decodeQueues(in.queues, args)
	for _, q := range queues {
		snap.Queues = append(snap.Queues, q.spec)
	}
	nodes := snap.NodesView()
	groups := decodePodGroups(in.podGroups)
	return &View{
		Generated:  now.UTC().Format(time.RFC3339),
		Cards:      cardMap(cli.BuildReport(nodes, now)),
		Queues:     queueShares(snap, nodes, queues),
		QueueShare: args.QueueShare,
		Pending:    pending(snap, groups, args),
		Unread:     unread,
	}
}
