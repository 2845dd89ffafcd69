package handoff_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/gc"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
	"github.com/tessera-gpu/tessera/internal/testing/nvmlfake"
)

func TestDirectoriesAreRemovedOnlyForPodsThatAreGone(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(2), 4)
	h.waitRegistered(1)
	running := pod("running", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
	deleting := pod("deleting", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
	gone := pod("gone", ctr{"main", []api.CardAssignment{card(h.uuids[1], 1000, 10)}})
	for _, p := range []*podT{{running}, {deleting}, {gone}} {
		h.bind(p.Pod)
		if _, err := h.kubelet.Admit(h.ctx, p.Pod); err != nil {
			t.Fatal(err)
		}
	}
	// "deleting" left the API server but the kubelet still runs it; "gone" left both.
	for _, p := range []*podT{{deleting}, {gone}} {
		if err := h.client.CoreV1().Pods(p.Namespace).Delete(h.ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.kubelet.Release(gone.UID)
	if !nodepods.WaitFor(h.ctx, 5*time.Second, 5*time.Millisecond, func() bool {
		return !h.pods.Exists(gone.UID) && !h.pods.Exists(deleting.UID)
	}) {
		t.Fatal("the informer never saw the deletions")
	}
	m := gc.New(h.pods, h.store, h.prc, h.hd.MarkIfComplete, 0)
	exists := func(p *podT) bool {
		_, err := os.Stat(filepath.Join(h.root, "pods", string(p.UID), "main"))
		return err == nil
	}
	if removed := m.Once(h.ctx); len(removed) != 0 || !exists(&podT{gone}) {
		t.Fatalf("first pass removed %v; a pod must be seen gone twice", removed)
	}
	removed := m.Once(h.ctx)
	if len(removed) != 1 || removed[0] != string(gone.UID) {
		t.Errorf("second pass removed %v, want only %s", removed, gone.UID)
	}
	if exists(&podT{gone}) || !exists(&podT{running}) || !exists(&podT{deleting}) {
		t.Errorf("directories: gone %v running %v deleting %v; want false true true",
			exists(&podT{gone}), exists(&podT{running}), exists(&podT{deleting}))
	}
}

func TestAHandoffMarkLostToAnAPIErrorIsCompletedByReconcile(t *testing.T) {
	h := newHarness(t, nvmlfake.Cards(1), 2)
	h.waitRegistered(1)
	var failing atomic.Bool
	failing.Store(true)
	h.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	p := pod("late", ctr{"main", []api.CardAssignment{card(h.uuids[0], 1000, 10)}})
	h.bind(p)
	if _, err := h.kubelet.Admit(h.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := h.kubelet.StartContainers(h.ctx, p); err != nil {
		t.Fatalf("the container must start even when the mark cannot be written: %v", err)
	}
	if got, _ := h.client.CoreV1().Pods(p.Namespace).Get(h.ctx, p.Name, metav1.GetOptions{}); got.Annotations[api.AnnotationHandoff] != api.HandoffPending {
		t.Fatalf("handoff %q while the API server fails", got.Annotations[api.AnnotationHandoff])
	}
	failing.Store(false)
	gc.New(h.pods, h.store, h.prc, h.hd.MarkIfComplete, 0).Once(h.ctx)
	h.waitHandoff(p, api.HandoffDone)
}
