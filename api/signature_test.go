package api_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/api"
)

func testKey(t testing.TB) api.SigningKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewSigningKey(priv)
}

func signedPod(key api.SigningKey) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team", UID: "uid-1", Annotations: map[string]string{
		api.AnnotationAssignment: `{"version":"v1","node":"n1","qos":"fixed-share","containers":[{"name":"c","cards":[{"uuid":"GPU-1","memoryMiB":1000,"cores":10}]}]}`,
	}}}
	p.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(p, "n1")
	return p
}

func TestASignatureVerifiesOnlyForThePodNodeAndAnnotationsItWasMadeFor(t *testing.T) {
	key := testKey(t)
	v := api.NewVerifier([]ed25519.PublicKey{key.Private.Public().(ed25519.PublicKey)})
	if err := v.VerifyPod(signedPod(key), "n1"); err != nil {
		t.Fatalf("the signed pod: %v", err)
	}
	tests := []struct {
		name  string
		spoil func(p *corev1.Pod) string // returns the node to verify for
		want  error
	}{
		{"another node", func(*corev1.Pod) string { return "n2" }, api.ErrBadSignature},
		{"another pod UID (a copied signature)", func(p *corev1.Pod) string { p.UID = "uid-2"; return "n1" }, api.ErrBadSignature},
		{"a raised memory", func(p *corev1.Pod) string {
			p.Annotations[api.AnnotationAssignment] = strings.Replace(p.Annotations[api.AnnotationAssignment], "1000", "9000", 1)
			return "n1"
		}, api.ErrBadSignature},
		{"a Volcano card list added beside it", func(p *corev1.Pod) string {
			p.Annotations[api.VolcanoAssignedIDs] = "GPU-1,NVIDIA,0,0:"
			return "n1"
		}, api.ErrBadSignature},
		{"no signature", func(p *corev1.Pod) string { delete(p.Annotations, api.AnnotationAssignmentSignature); return "n1" }, api.ErrUnsigned},
		{"a key nobody published", func(p *corev1.Pod) string {
			p.Annotations[api.AnnotationAssignmentSignature] = testKey(t).SignPod(p, "n1")
			return "n1"
		}, api.ErrUnknownKey},
		{"garbage", func(p *corev1.Pod) string { p.Annotations[api.AnnotationAssignmentSignature] = "v1.x"; return "n1" }, api.ErrBadSignature},
		{"a short signature", func(p *corev1.Pod) string {
			s := p.Annotations[api.AnnotationAssignmentSignature]
			p.Annotations[api.AnnotationAssignmentSignature] = s[:len(s)-4]
			return "n1"
		}, api.ErrBadSignature},
		{"another version", func(p *corev1.Pod) string {
			p.Annotations[api.AnnotationAssignmentSignature] = "v2" + p.Annotations[api.AnnotationAssignmentSignature][2:]
			return "n1"
		}, api.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := signedPod(key)
			node := tt.spoil(p)
			if err := v.VerifyPod(p, node); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if err := (*api.Verifier)(nil).VerifyPod(signedPod(key), "n1"); !errors.Is(err, api.ErrUnknownKey) {
		t.Fatalf("a verifier without keys: err = %v, want ErrUnknownKey", err)
	}
}

func TestKeySetsRoundTripAndTheSigningKeyWaitsForActivation(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gen := func(at time.Time) api.KeyEntry {
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		return api.NewKeyEntry(priv, at)
	}
	ks := &api.KeySet{Keys: []api.KeyEntry{gen(t0), gen(t0.Add(time.Hour))}}
	s, err := api.EncodeKeySet(ks)
	if err != nil {
		t.Fatal(err)
	}
	back, err := api.DecodeKeySet(s, true)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := back.Signing(t0.Add(time.Hour+time.Minute), 2*time.Minute); k.ID != ks.Keys[0].ID {
		t.Errorf("one minute after the second key was made, signing with %s, want the first %s", k.ID, ks.Keys[0].ID)
	}
	k, _ := back.Signing(t0.Add(time.Hour+3*time.Minute), 2*time.Minute)
	if k.ID != ks.Keys[1].ID {
		t.Errorf("after activation, signing with %s, want the second %s", k.ID, ks.Keys[1].ID)
	}
	pubDoc, err := api.EncodeKeySet(back.Public())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(pubDoc, string(ks.Keys[0].Key)) {
		t.Fatal("the public document carries a seed")
	}
	pub, err := api.DecodeKeySet(pubDoc, false)
	if err != nil {
		t.Fatal(err)
	}
	p := signedPod(k)
	if err := pub.Verifier().VerifyPod(p, "n1"); err != nil {
		t.Fatalf("the published keys do not verify the current key's signature: %v", err)
	}
	// A private document read as public (or the reverse) fails the ID check.
	if _, err := api.DecodeKeySet(s, false); err == nil || !strings.Contains(err.Error(), api.VerificationKeysDataKey+".keys[0].id") {
		t.Fatalf("a seed read as a public key: err = %v, want the ID mismatch named", err)
	}
	if _, err := api.DecodeKeySet(`{"version":"v9","keys":[]}`, false); !errors.Is(err, api.ErrUnsupportedVersion) {
		t.Fatalf("err = %v, want ErrUnsupportedVersion", err)
	}
}

func FuzzVerifySignature(f *testing.F) {
	key := testKey(f)
	v := api.NewVerifier([]ed25519.PublicKey{key.Private.Public().(ed25519.PublicKey)})
	good := signedPod(key)
	f.Add(good.Annotations[api.AnnotationAssignmentSignature], "uid-1", "n1", good.Annotations[api.AnnotationAssignment])
	f.Add("v1..", "", "", "")
	f.Add("v1."+key.ID+".", "u", "n", "{}")
	f.Fuzz(func(t *testing.T, sig, uid, node, asg string) {
		err := v.Verify(sig, uid, node, asg, "")
		if err == nil && (sig != key.Sign(uid, node, asg, "")) {
			// Ed25519 signatures are deterministic: anything else verifying is a forgery.
			t.Fatalf("a signature that is not the key's own verified: %q", sig)
		}
		if err != nil && len(err.Error()) > 600 {
			t.Fatalf("error of %d bytes: hostile input is echoed unbounded", len(err.Error()))
		}
	})
}

func FuzzDecodeKeySet(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, _ := api.EncodeKeySet(&api.KeySet{Keys: []api.KeyEntry{api.NewKeyEntry(priv, time.Unix(0, 0))}})
	f.Add(s, true)
	f.Add(`{"version":"v1","keys":[{"id":"x","key":"AAAA"}]}`, false)
	f.Fuzz(func(t *testing.T, doc string, private bool) {
		ks, err := api.DecodeKeySet(doc, private)
		if err != nil {
			return
		}
		if private {
			ks = ks.Public()
		}
		if ks.Verifier().Len() > len(ks.Keys) {
			t.Fatal("more keys than entries")
		}
	})
}

// BenchmarkSignAndVerify is what signing costs the scheduler per assignment and
// verifying costs the agent per Allocate.
func BenchmarkSignAndVerify(b *testing.B) {
	key := testKey(b)
	v := api.NewVerifier([]ed25519.PublicKey{key.Private.Public().(ed25519.PublicKey)})
	p := signedPod(key)
	b.Run("sign", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = key.SignPod(p, "n1")
		}
	})
	b.Run("verify", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := v.VerifyPod(p, "n1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
