package ui

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Volcano's scheduling API, read through the dynamic client so that the CLI links no
// Volcano package.
var (
	volcanoScheduling = schema.GroupVersion{Group: "scheduling.volcano.sh", Version: "v1beta1"}
	queuesResource    = volcanoScheduling.WithResource("queues")
	podGroupsResource = volcanoScheduling.WithResource("podgroups")
)

// Clients are the API clients the card map reads through.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// reach is what the account may list and watch, found before any informer starts:
// an informer refused a watch retries forever without saying why.
type reach struct {
	// podNamespace is the one namespace whose pods (and PodGroups) are read; "" is all.
	podNamespace string
	queues       bool
	podGroups    bool
	// unread says what the page lacks and why, in the CLI's words.
	unread []string
}

// probeReach tries a list and a watch of every resource the page reads. Nodes are
// required (the card map is made of them); pods fall back to one namespace as the
// CLI's do; Volcano's queues and PodGroups are left out where absent or refused.
func probeReach(ctx context.Context, c Clients, o Options) (*reach, error) {
	r := &reach{}
	nodes := c.Kube.CoreV1().Nodes()
	err := mayWatch(ctx, func(opts metav1.ListOptions) (string, error) {
		l, err := nodes.List(ctx, opts)
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(opts metav1.ListOptions) (watch.Interface, error) { return nodes.Watch(ctx, opts) })
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("the card map is made of the cluster's Nodes, which your account may not list and watch "+
			"(the card map needs list and watch on nodes, pods and Volcano's queues and podgroups): %w", err)
	} else if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}

	err = mayWatchPods(ctx, c.Kube, "")
	if apierrors.IsForbidden(err) && !o.AllNamespaces && o.Namespace != "" {
		r.podNamespace = o.Namespace
		r.unread = append(r.unread, fmt.Sprintf("your account may not list and watch pods in every namespace; only namespace %s is read, "+
			"so cards may look freer than they are (use -A to fail instead)", o.Namespace))
		err = mayWatchPods(ctx, c.Kube, o.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("read pods: %w", err)
	}

	served, err := volcanoResources(c.Kube)
	if err != nil {
		return nil, err
	}
	if served == nil {
		r.unread = append(r.unread, "Volcano's scheduling.volcano.sh/v1beta1 API is not served, so queue shares and PodGroups are not shown")
		return r, nil
	}
	if slices.Contains(served, queuesResource.Resource) {
		switch err := mayWatchDynamic(ctx, c.Dynamic, queuesResource, ""); {
		case err == nil:
			r.queues = true
		case apierrors.IsForbidden(err):
			r.unread = append(r.unread, "your account may not list and watch Volcano queues, so queue shares are not shown")
		default:
			return nil, fmt.Errorf("read Volcano queues: %w", err)
		}
	}
	if slices.Contains(served, podGroupsResource.Resource) {
		switch err := mayWatchDynamic(ctx, c.Dynamic, podGroupsResource, r.podNamespace); {
		case err == nil:
			r.podGroups = true
		case apierrors.IsForbidden(err):
			r.unread = append(r.unread, "your account may not list and watch Volcano PodGroups, so gangs not yet admitted "+
				"are not shown and pending pods' reasons come from the pods alone")
		default:
			return nil, fmt.Errorf("read Volcano PodGroups: %w", err)
		}
	}
	return r, nil
}

// volcanoResources names the resources of Volcano's scheduling API; nil when the API
// is not served (Volcano not installed).
func volcanoResources(kube kubernetes.Interface) ([]string, error) {
	l, err := kube.Discovery().ServerResourcesForGroupVersion(volcanoScheduling.String())
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover Volcano's API: %w", err)
	}
	names := []string{}
	for _, res := range l.APIResources {
		names = append(names, res.Name)
	}
	return names, nil
}

// mayWatch lists one object, then opens and closes a watch from the list's version,
// so that the watch replays nothing: the two verbs an informer uses.
func mayWatch(ctx context.Context, list func(metav1.ListOptions) (string, error), open func(metav1.ListOptions) (watch.Interface, error)) error {
	rv, err := list(metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	timeout := int64(1)
	w, err := open(metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &timeout})
	if err != nil {
		return err
	}
	w.Stop()
	return ctx.Err()
}

func mayWatchPods(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	pods := kube.CoreV1().Pods(namespace)
	return mayWatch(ctx, func(opts metav1.ListOptions) (string, error) {
		l, err := pods.List(ctx, opts)
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(opts metav1.ListOptions) (watch.Interface, error) { return pods.Watch(ctx, opts) })
}

func mayWatchDynamic(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string) error {
	res := dyn.Resource(gvr).Namespace(namespace)
	return mayWatch(ctx, func(opts metav1.ListOptions) (string, error) {
		l, err := res.List(ctx, opts)
		if err != nil {
			return "", err
		}
		return l.GetResourceVersion(), nil
	}, func(opts metav1.ListOptions) (watch.Interface, error) { return res.Watch(ctx, opts) })
}
