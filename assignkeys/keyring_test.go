package assignkeys_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/assignkeys"
)

var (
	secretRef = types.NamespacedName{Namespace: "tessera-system", Name: "tessera-assignment-signing"}
	cmRef     = types.NamespacedName{Namespace: "tessera-system", Name: "tessera-assignment-keys"}
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func keyring(client *fake.Clientset, c *clock) *assignkeys.Keyring {
	return &assignkeys.Keyring{Secrets: client.CoreV1(), ConfigMaps: client.CoreV1(), Secret: secretRef, ConfigMap: cmRef,
		Rotation: 24 * time.Hour, Activation: 2 * time.Minute, Now: c.now}
}

func pod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Annotations: map[string]string{api.AnnotationAssignment: "{}"}}}
}

func published(t *testing.T, client *fake.Clientset) *api.KeySet {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps(cmRef.Namespace).Get(context.Background(), cmRef.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := api.DecodeKeySet(cm.Data[api.VerificationKeysDataKey], false)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestTheFirstReplicaMakesTheKeyAndEveryReplicaSignsWithIt(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset()
	c := &clock{time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	a, b := keyring(client, c), keyring(client, c)
	if _, ok := a.Key(); ok {
		t.Fatal("a keyring that never synced has a key")
	}
	for _, k := range []*assignkeys.Keyring{a, b} {
		if err := k.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ka, _ := a.Key()
	kb, _ := b.Key()
	if ka.ID != kb.ID {
		t.Fatalf("replicas sign with %s and %s", ka.ID, kb.ID)
	}
	pub := published(t, client)
	if len(pub.Keys) != 1 || pub.Keys[0].ID != ka.ID {
		t.Fatalf("published %v, want the one key %s", pub.Keys, ka.ID)
	}
	p := pod()
	p.Annotations[api.AnnotationAssignmentSignature] = ka.SignPod(p, "n")
	if err := pub.Verifier().VerifyPod(p, "n"); err != nil {
		t.Fatal(err)
	}
	cm, _ := client.CoreV1().ConfigMaps(cmRef.Namespace).Get(ctx, cmRef.Name, metav1.GetOptions{})
	if s := cm.Data[api.VerificationKeysDataKey]; strings.Contains(s, "seed") || len(s) > 400 {
		t.Fatalf("the public ConfigMap looks like it carries more than public keys: %s", s)
	}
}

func TestRotationPublishesTheNewKeyBeforeSigningAndRetiresTheOldOne(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset()
	c := &clock{time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	k := keyring(client, c)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := k.Key()

	c.t = c.t.Add(25 * time.Hour)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := published(t, client); len(got.Keys) != 2 {
		t.Fatalf("after rotation %d keys published, want old and new", len(got.Keys))
	}
	if cur, _ := k.Key(); cur.ID != first.ID {
		t.Fatalf("signing with the new key %s before its activation", cur.ID)
	}
	c.t = c.t.Add(3 * time.Minute)
	second, _ := k.Key()
	if second.ID == first.ID {
		t.Fatal("still signing with the old key after activation")
	}
	// The old key stays published for another rotation period, then goes.
	c.t = c.t.Add(23 * time.Hour)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := published(t, client); len(got.Keys) != 2 {
		t.Fatalf("%d keys published a day after rotation, want both still", len(got.Keys))
	}
	c.t = c.t.Add(2 * time.Hour)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := published(t, client)
	ids := map[string]bool{}
	for _, e := range got.Keys {
		ids[e.ID] = true
	}
	if ids[first.ID] || !ids[second.ID] {
		t.Fatalf("published %v, want the first key retired and the second kept", got.Keys)
	}
}

func TestAMalformedSecretIsAnErrorAndNothingIsOverwritten(t *testing.T) {
	ctx := context.Background()
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretRef.Name, Namespace: secretRef.Namespace},
		Data: map[string][]byte{api.SigningKeysDataKey: []byte(`{"version":"v1","keys":[{"id":"x","key":"AAAA"}]}`)}}
	client := fake.NewSimpleClientset(bad)
	k := keyring(client, &clock{time.Now()})
	err := k.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), api.SigningKeysDataKey+".keys[0].key") {
		t.Fatalf("err = %v, want the bad field named", err)
	}
	s, _ := client.CoreV1().Secrets(secretRef.Namespace).Get(ctx, secretRef.Name, metav1.GetOptions{})
	if string(s.Data[api.SigningKeysDataKey]) != string(bad.Data[api.SigningKeysDataKey]) {
		t.Fatal("a Secret the keyring could not read was overwritten")
	}
	if _, ok := k.Key(); ok {
		t.Fatal("a key after a failed first sync")
	}
}

func TestTheWatcherFollowsThePublishedKeys(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewSimpleClientset()
	w := &assignkeys.Watcher{Client: client, ConfigMap: cmRef}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Verifier(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("before the scheduler published: err = %v, want it said the ConfigMap does not exist", err)
	}
	c := &clock{time.Now()}
	k := keyring(client, c)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	key, _ := k.Key()
	p := pod()
	p.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(p, "n")
	waitFor(t, func() bool {
		v, err := w.Verifier()
		return err == nil && v.VerifyPod(p, "n") == nil
	})
	// Garbage in the ConfigMap: nothing verifies (refusing is safe, guessing is not).
	cm, _ := client.CoreV1().ConfigMaps(cmRef.Namespace).Get(ctx, cmRef.Name, metav1.GetOptions{})
	cm.Data[api.VerificationKeysDataKey] = "{"
	if _, err := client.CoreV1().ConfigMaps(cmRef.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := w.Verifier(); return err != nil })
	if err := client.CoreV1().ConfigMaps(cmRef.Namespace).Delete(ctx, cmRef.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := w.Verifier(); return err != nil && strings.Contains(err.Error(), "deleted") })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseRefNamesTheFlagAndTheValue(t *testing.T) {
	for _, s := range []string{"", "ns", "/n", "ns/", "a/b/c"} {
		if _, err := assignkeys.ParseRef("--flag", s); err == nil || !strings.Contains(err.Error(), "--flag") {
			t.Errorf("ParseRef(%q): err = %v, want the flag named", s, err)
		}
	}
	if r, err := assignkeys.ParseRef("--flag", "ns/name"); err != nil || r.Namespace != "ns" || r.Name != "name" {
		t.Errorf("ParseRef(ns/name) = %v, %v", r, err)
	}
}

// An agent that may not read the keys starts anyway, refusing every assignment, and
// reads them once it may.
func TestAWatcherThatCannotListStartsAndRefusesUntilItCan(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewSimpleClientset()
	var allowed atomic.Bool
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no"))
	})
	w := &assignkeys.Watcher{Client: client, ConfigMap: cmRef, SyncWait: 100 * time.Millisecond}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("start without permission: %v", err)
	}
	if _, err := w.Verifier(); err == nil {
		t.Fatal("keys without having read any")
	}
	k := keyring(client, &clock{time.Now()})
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	allowed.Store(true)
	key, _ := k.Key()
	p := pod()
	p.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(p, "n")
	deadline := time.Now().Add(20 * time.Second) // the reflector backs off between lists
	for {
		v, err := w.Verifier()
		if err == nil && v.VerifyPod(p, "n") == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys never read once the agent may: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
