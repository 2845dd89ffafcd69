// Package assignkeys keeps the keys that make a card assignment the scheduler's own.
// The scheduler signs every assignment it writes (api.SigningKey); the node agent
// honours an assignment only when the signature verifies against a key the scheduler
// published. A tenant can write any pod annotation it likes; it cannot sign.
//
// The scheduler's Keyring keeps its private keys in a Secret that only it can read,
// creates the first key itself, rotates them, and publishes the public keys in a
// ConfigMap; the agents' Watcher follows that ConfigMap.
package assignkeys

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/api"
)

// Defaults of the keyring's timing.
const (
	// DefaultRotation is how old the newest key may grow before a new one is made.
	DefaultRotation = 30 * 24 * time.Hour
	// DefaultActivation is how long a new key is published before it signs: every
	// agent's watch must have it by then.
	DefaultActivation = 2 * time.Minute
	// DefaultResync is how often the keyring reads the Secret again (other replicas,
	// an operator's rotation) and rotates when due.
	DefaultResync = 10 * time.Minute
)

// Keyring is the scheduler's signing state: it reads and writes its Secret and
// ConfigMap, and signs with the key Signing picks. Safe for concurrent use.
type Keyring struct {
	Secrets    corev1client.SecretsGetter
	ConfigMaps corev1client.ConfigMapsGetter
	Secret     types.NamespacedName
	ConfigMap  types.NamespacedName
	Rotation   time.Duration
	Activation time.Duration
	Now        func() time.Time

	keys atomic.Pointer[api.KeySet]
}

// Key returns the key to sign with now; ok is false until Sync has succeeded once.
func (k *Keyring) Key() (api.SigningKey, bool) {
	ks := k.keys.Load()
	if ks == nil {
		return api.SigningKey{}, false
	}
	return ks.Signing(k.now(), k.Activation)
}

func (k *Keyring) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// Run syncs every resync until ctx ends, logging failures (the last good keys stay).
func (k *Keyring) Run(ctx context.Context, resync time.Duration) {
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := k.Sync(ctx); err != nil {
				klog.ErrorS(err, "Could not sync the assignment signing keys; signing with the last keys read")
			}
		}
	}
}

// Sync reads the Secret, creates the first key or a successor when the newest is older
// than Rotation, drops keys superseded for longer than Rotation, writes the Secret back
// when it changed, and publishes the public keys. Replicas racing settle on the Secret
// the API server stored first.
func (k *Keyring) Sync(ctx context.Context) error {
	secrets := k.Secrets.Secrets(k.Secret.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		s, err := secrets.Get(ctx, k.Secret.Name, metav1.GetOptions{})
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("secret %s: %w", k.Secret, err)
		}
		ks := &api.KeySet{Version: api.KeySetVersion}
		if exists {
			if ks, err = api.DecodeKeySet(string(s.Data[api.SigningKeysDataKey]), true); err != nil {
				return fmt.Errorf("secret %s: %w", k.Secret, err)
			}
		}
		changed, err := k.rotate(ks)
		if err != nil {
			return err
		}
		if changed {
			data, err := api.EncodeKeySet(ks)
			if err != nil {
				return err
			}
			if exists {
				s.Data = map[string][]byte{api.SigningKeysDataKey: []byte(data)}
				_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
			} else {
				_, err = secrets.Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: k.Secret.Name, Namespace: k.Secret.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "tessera"}},
					Type:       corev1.SecretTypeOpaque, Data: map[string][]byte{api.SigningKeysDataKey: []byte(data)}}, metav1.CreateOptions{})
			}
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				continue // another replica wrote first: read theirs
			}
			if err != nil {
				return fmt.Errorf("write secret %s: %w", k.Secret, err)
			}
			klog.InfoS("Assignment signing keys written", "secret", k.Secret, "keys", keyIDs(ks))
		}
		// Publish before signing with anything new: Signing waits Activation after
		// a key's creation, and the first key signs nothing an agent saw before.
		if err := k.publish(ctx, ks.Public()); err != nil {
			return err
		}
		k.keys.Store(ks)
		return nil
	}
	return fmt.Errorf("secret %s: kept changing under three attempts to write it", k.Secret)
}

// rotate adds a key when there is none or the newest is older than Rotation, and drops
// keys whose successor is older than Rotation: by then nothing they signed waits for a
// node to admit it.
func (k *Keyring) rotate(ks *api.KeySet) (bool, error) {
	now := k.now()
	changed := false
	if n := len(ks.Keys); n == 0 || (k.Rotation > 0 && now.Sub(ks.Keys[n-1].Created) >= k.Rotation) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return false, fmt.Errorf("generate signing key: %w", err)
		}
		ks.Keys = append(ks.Keys, api.NewKeyEntry(priv, now))
		changed = true
	}
	if k.Rotation > 0 {
		for len(ks.Keys) > 1 && now.Sub(ks.Keys[1].Created) >= k.Rotation+k.Activation {
			ks.Keys = ks.Keys[1:]
			changed = true
		}
	}
	return changed, nil
}

// publish writes the public keys into the ConfigMap the agents watch, when they differ.
func (k *Keyring) publish(ctx context.Context, pub *api.KeySet) error {
	data, err := api.EncodeKeySet(pub)
	if err != nil {
		return err
	}
	cms := k.ConfigMaps.ConfigMaps(k.ConfigMap.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		cm, err := cms.Get(ctx, k.ConfigMap.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: k.ConfigMap.Name, Namespace: k.ConfigMap.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "tessera"}},
				Data:       map[string]string{api.VerificationKeysDataKey: data}}, metav1.CreateOptions{})
		case err != nil:
			return fmt.Errorf("configmap %s: %w", k.ConfigMap, err)
		case cm.Data[api.VerificationKeysDataKey] == data:
			return nil
		default:
			cm.Data = map[string]string{api.VerificationKeysDataKey: data}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write configmap %s: %w", k.ConfigMap, err)
		}
		klog.InfoS("Assignment verification keys published", "configMap", k.ConfigMap, "keys", keyIDs(pub))
		return nil
	}
	return fmt.Errorf("configmap %s: kept changing under three attempts to write it", k.ConfigMap)
}

func keyIDs(ks *api.KeySet) []string {
	out := make([]string, len(ks.Keys))
	for i, k := range ks.Keys {
		out[i] = k.ID
	}
	return out
}

// ParseRef reads "namespace/name".
func ParseRef(flag, s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s: %q is not namespace/name", flag, s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
