package memguard

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// PodEvents reports on the pod itself, where `kubectl describe pod` shows it.
type PodEvents struct {
	Client kubernetes.Interface
	Node   string
	Now    func() time.Time
}

// Report implements Reporter. A failure is logged: the guard's action stands either way.
func (p PodEvents) Report(ctx context.Context, namespace, name string, uid types.UID, reason, message string) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	t := metav1.NewTime(now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: name + ".", Namespace: namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: uid},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "tessera-device-plugin", Host: p.Node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: "tessera.io/device-plugin", ReportingInstance: fmt.Sprintf("tessera-device-plugin-%s", p.Node),
	}
	if _, err := p.Client.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.ErrorS(err, "Memory guard: cannot post the event on the pod", "pod", klog.KRef(namespace, name), "reason", reason)
	}
}
