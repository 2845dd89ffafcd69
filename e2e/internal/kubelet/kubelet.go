package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/deviceplugin/kubeletsim"
)

// Options configure one stand-in.
type Options struct {
	Node               string
	DevicePluginDir    string
	PodResourcesSocket string
	Resource           string
	RecordDir          string // one JSON Record per started container
	Labels             map[string]string
	CPU, Memory        string
	StatusInterval     time.Duration
}

// Kubelet is one node's stand-in.
type Kubelet struct {
	opts   Options
	client kubernetes.Interface
	dev    *kubeletsim.Kubelet // set by Run
	queue  chan *corev1.Pod
	seen   map[types.UID]bool // pods admitted or rejected (touched only by the admission loop)

	mu      sync.Mutex
	deleted map[types.UID]bool // pods deleted or deleting: never admitted, released if admitted meanwhile
}

// New returns a stand-in; Run starts it.
func New(client kubernetes.Interface, opts Options) *Kubelet {
	if opts.StatusInterval == 0 {
		opts.StatusInterval = 10 * time.Second
	}
	return &Kubelet{opts: opts, client: client,
		queue: make(chan *corev1.Pod, 4096), seen: map[types.UID]bool{}, deleted: map[types.UID]bool{}}
}

// Run serves the sockets, registers the Node and handles its pods until ctx ends.
func (k *Kubelet) Run(ctx context.Context) error {
	if err := os.MkdirAll(k.opts.RecordDir, 0o755); err != nil {
		return err
	}
	dev, err := startDevices(ctx, k.opts)
	if err != nil {
		return err
	}
	k.dev = dev
	if err := k.register(ctx); err != nil {
		return err
	}
	go k.statusLoop(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.opts.Node).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { k.observe(o.(*corev1.Pod)) },
		UpdateFunc: func(_, o interface{}) { k.observe(o.(*corev1.Pod)) },
		DeleteFunc: func(o interface{}) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				k.markDeleted(p.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	klog.InfoS("Kubelet stand-in running", "node", k.opts.Node)
	k.admissionLoop(ctx)
	return nil
}

// observe routes pod events: new pods to admission, terminating pods to clean-up.
func (k *Kubelet) observe(p *corev1.Pod) {
	if p.DeletionTimestamp != nil {
		k.markDeleted(p.UID)
		go k.finalizeDeletion(p)
		return
	}
	if p.Status.Phase == corev1.PodPending && p.Status.StartTime == nil {
		k.queue <- p
	}
}

func (k *Kubelet) markDeleted(uid types.UID) {
	k.mu.Lock()
	k.deleted[uid] = true
	k.mu.Unlock()
	k.dev.Release(uid)
}

func (k *Kubelet) isDeleted(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deleted[uid]
}

// admissionLoop admits pods one at a time, like the kubelet's HandlePodAdditions.
func (k *Kubelet) admissionLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-k.queue:
			if k.seen[p.UID] || k.isDeleted(p.UID) {
				continue
			}
			k.seen[p.UID] = true
			allocs, err := k.dev.Admit(ctx, p)
			if k.isDeleted(p.UID) {
				k.dev.Release(p.UID) // deleted while being admitted
				continue
			}
			if err != nil {
				k.dev.Release(p.UID)
				klog.InfoS("Pod rejected at admission", "pod", klog.KObj(p), "err", err)
				k.setFailed(ctx, p, "UnexpectedAdmissionError", err.Error())
				continue
			}
			go k.runPod(ctx, p, allocs)
		}
	}
}

// runPod starts the containers (PreStartContainer, retried with back-off as a failing
// container start is), records what each received, reports Running and, for `sleep N`
// commands, Succeeded after N seconds.
func (k *Kubelet) runPod(ctx context.Context, p *corev1.Pod, allocs map[string]*kubeletsim.Allocation) {
	backoff := time.Second
	for _, c := range p.Spec.Containers {
		for {
			err := k.dev.PreStart(ctx, p, c.Name)
			if err == nil {
				break
			}
			klog.InfoS("Container start failed", "pod", klog.KObj(p), "container", c.Name, "err", err)
			k.setWaiting(ctx, p, c.Name, "CreateContainerError", err.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if backoff < 10*time.Second {
				backoff *= 2
			}
			if k.podGone(ctx, p) {
				return
			}
		}
		if err := k.record(p, c, allocs[c.Name]); err != nil {
			klog.ErrorS(err, "Cannot record the container", "pod", klog.KObj(p), "container", c.Name)
		}
	}
	if !k.setRunning(ctx, p) {
		return
	}
	d, ok := runTime(p)
	if !ok {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(d):
	}
	k.dev.Release(p.UID)
	k.setSucceeded(ctx, p)
}

func (k *Kubelet) podGone(ctx context.Context, p *corev1.Pod) bool {
	cur, err := k.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && (cur.UID != p.UID || cur.DeletionTimestamp != nil))
}

// runTime reads `sleep N` (also `sh -c "sleep N"`) from every container; the pod runs
// for the longest. Any other command runs until the pod is deleted.
func runTime(p *corev1.Pod) (time.Duration, bool) {
	var longest time.Duration
	for _, c := range p.Spec.Containers {
		words := strings.Fields(strings.Join(append(append([]string{}, c.Command...), c.Args...), " "))
		if len(words) >= 3 && (words[0] == "sh" || words[0] == "/bin/sh") && words[1] == "-c" {
			words = words[2:]
		}
		if len(words) != 2 || words[0] != "sleep" {
			return 0, false
		}
		s, err := strconv.ParseFloat(strings.Trim(words[1], `"'`), 64)
		if err != nil || math.IsInf(s, 0) || math.IsNaN(s) || s < 0 || s > 1e6 {
			return 0, false // "sleep infinity" and friends run until deleted
		}
		if d := time.Duration(s * float64(time.Second)); d > longest {
			longest = d
		}
	}
	return longest, true
}

// Record is what one container would have received from the kubelet.
type Record struct {
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	UID         string            `json:"uid"`
	Container   string            `json:"container"`
	Node        string            `json:"node"`
	DeviceIDs   []string          `json:"deviceIDs"`
	Env         map[string]string `json:"env"`
	Mounts      []Mount           `json:"mounts"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// LimitsFile is the KEY=VALUE content of the limits file the container would read
	// (found through TESSERA_LIMITS_FILE and the mount holding it), after PreStartContainer.
	LimitsFile map[string]string `json:"limitsFile,omitempty"`
	StartedAt  time.Time         `json:"startedAt"`
}

// Mount is one mount from the Allocate response.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
}

func (k *Kubelet) record(p *corev1.Pod, c corev1.Container, a *kubeletsim.Allocation) error {
	r := Record{Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), Container: c.Name, Node: k.opts.Node,
		Env: map[string]string{}, StartedAt: time.Now()}
	for _, e := range c.Env {
		r.Env[e.Name] = e.Value
	}
	if a != nil {
		r.DeviceIDs = a.IDs
		for n, v := range a.Response.Envs {
			r.Env[n] = v
		}
		for _, m := range a.Response.Mounts {
			r.Mounts = append(r.Mounts, Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
		}
		r.Annotations = a.Response.Annotations
		if path, ok := r.Env["TESSERA_LIMITS_FILE"]; ok {
			r.LimitsFile = readLimits(hostPath(path, r.Mounts))
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(k.opts.RecordDir, fmt.Sprintf("%s_%s_%s_%s.json", p.Namespace, p.Name, p.UID, c.Name))
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// hostPath maps a container path to the host through the mounts.
func hostPath(path string, mounts []Mount) string {
	for _, m := range mounts {
		if rel, err := filepath.Rel(m.ContainerPath, path); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(m.HostPath, rel)
		}
	}
	return ""
}

func readLimits(path string) map[string]string {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			out[k] = v
		}
	}
	return out
}

// ---- Node ----

func (k *Kubelet) register(ctx context.Context) error {
	labels := map[string]string{"kubernetes.io/hostname": k.opts.Node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	for n, v := range k.opts.Labels {
		labels[n] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.opts.Node, Labels: labels}}
	if _, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node: %w", err)
	}
	return k.updateNode(ctx)
}

func (k *Kubelet) statusLoop(ctx context.Context) {
	t := time.NewTicker(k.opts.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-k.dev.Changed():
		}
		if err := k.updateNode(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Node status update failed")
		}
	}
}

// updateNode reports the capacity and a Ready condition and removes the not-ready taint
// (the node lifecycle controller's job, which this control plane does not run).
func (k *Kubelet) updateNode(ctx context.Context) error {
	capacity, allocatable := slotCounts(k.dev)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.client.CoreV1().Nodes().Get(ctx, k.opts.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		res := func(slots int) corev1.ResourceList {
			return corev1.ResourceList{
				corev1.ResourceCPU:                   resource.MustParse(k.opts.CPU),
				corev1.ResourceMemory:                resource.MustParse(k.opts.Memory),
				corev1.ResourcePods:                  resource.MustParse("110"),
				corev1.ResourceEphemeralStorage:      resource.MustParse("100Gi"),
				corev1.ResourceName(k.opts.Resource): *resource.NewQuantity(int64(slots), resource.DecimalSI),
			}
		}
		n.Status.Capacity, n.Status.Allocatable = res(capacity), res(allocatable)
		n.Status.Conditions = []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet stand-in is posting ready status", now),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "", now),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "", now),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "", now),
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.opts.Node}}
		n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.34.2", OperatingSystem: "linux", Architecture: "amd64"}
		n, err = k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		var keep []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				keep = append(keep, t)
			}
		}
		if len(keep) != len(n.Spec.Taints) {
			n.Spec.Taints = keep
			_, err = k.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}
		return err
	})
}

func cond(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string, now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
}

// ---- Pod status ----

func (k *Kubelet) updatePodStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.Pod)) bool {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != p.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), p.Name)
		}
		mutate(cur)
		_, err = k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		klog.ErrorS(err, "Pod status update failed", "pod", klog.KObj(p))
	}
	return err == nil
}

func podConditions(ready corev1.ConditionStatus, now metav1.Time) []corev1.PodCondition {
	c := func(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
	}
	return []corev1.PodCondition{c(corev1.PodScheduled, corev1.ConditionTrue), c(corev1.PodInitialized, corev1.ConditionTrue),
		c(corev1.ContainersReady, ready), c(corev1.PodReady, ready)}
}

func (k *Kubelet) setRunning(ctx context.Context, p *corev1.Pod) bool {
	return k.updatePodStatus(ctx, p, func(cur *corev1.Pod) {
		now := metav1.Now()
		cur.Status.Phase = corev1.PodRunning
		cur.Status.StartTime = &now
		cur.Status.HostIP = "127.0.0.1"
		cur.Status.PodIP = "10.244.0.1"
		cur.Status.Conditions = podConditions(corev1.ConditionTrue, now)
		cur.Status.ContainerStatuses = nil
		for _, c := range cur.Spec.Containers {
			cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				ImageID: c.Image, Ready: true, Started: ptr(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
	})
}

func (k *Kubelet) setSucceeded(ctx context.Context, p *corev1.Pod) {
	k.updatePodStatus(ctx, p, func(cur *corev1.Pod) {
		now := metav1.Now()
		cur.Status.Phase = corev1.PodSucceeded
		cur.Status.Conditions = podConditions(corev1.ConditionFalse, now)
		for i := range cur.Status.ContainerStatuses {
			s := &cur.Status.ContainerStatuses[i]
			var started metav1.Time
			if s.State.Running != nil {
				started = s.State.Running.StartedAt
			}
			s.Ready, s.Started = false, ptr(false)
			s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now}}
		}
	})
}

func (k *Kubelet) setFailed(ctx context.Context, p *corev1.Pod, reason, msg string) {
	k.updatePodStatus(ctx, p, func(cur *corev1.Pod) {
		cur.Status.Phase = corev1.PodFailed
		cur.Status.Reason, cur.Status.Message = reason, msg
	})
}

func (k *Kubelet) setWaiting(ctx context.Context, p *corev1.Pod, container, reason, msg string) {
	k.updatePodStatus(ctx, p, func(cur *corev1.Pod) {
		var statuses []corev1.ContainerStatus
		for _, c := range cur.Spec.Containers {
			s := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
			if c.Name == container {
				s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
			} else {
				s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
			}
			statuses = append(statuses, s)
		}
		cur.Status.ContainerStatuses = statuses
	})
}

// finalizeDeletion removes a terminating pod for good, as the kubelet does once its
// containers are gone.
func (k *Kubelet) finalizeDeletion(p *corev1.Pod) {
	zero := int64(0)
	uid := p.UID
	err := k.client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name,
		metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.ErrorS(err, "Cannot finalize pod deletion", "pod", klog.KObj(p))
	}
}

func ptr[T any](v T) *T { return &v }
