package nodepods_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
)

// swappable hands out whichever verifier the test set last, as the agent's watch does
// when the scheduler rotates its keys.
type swappable struct{ v *api.Verifier }

func (s *swappable) Verifier() (*api.Verifier, error) { return s.v, nil }

func signedPod(t *testing.T, key api.SigningKey, uid string) *corev1.Pod {
	t.Helper()
	a, err := api.EncodeAssignment(&api.PodAssignment{Node: "n1", QoS: api.QoSFixedShare, Containers: []api.ContainerAssignment{
		{Name: "main", Cards: []api.CardAssignment{{UUID: "GPU-00000001-0000-4000-8000-000000000001", MemoryMiB: 1000, Cores: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID("uid-" + uid), Annotations: map[string]string{api.AnnotationAssignment: a}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			api.ResourceNumber: resource.MustParse("1"), api.ResourceMemory: resource.MustParse("1000"), api.ResourceCores: resource.MustParse("10")}}}}}}
	p.Annotations[api.AnnotationAssignmentSignature] = key.SignPod(p, "n1")
	return p
}

func newKey(t *testing.T) (api.SigningKey, *api.Verifier) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewSigningKey(priv), api.NewVerifier([]ed25519.PublicKey{priv.Public().(ed25519.PublicKey)})
}

// The memo of verified signatures never lets through what the signature does not
// cover: changed content under a remembered signature, another pod, or keys the
// scheduler no longer publishes.
func TestTheVerifiedMemoRemembersExactlyWhatWasSigned(t *testing.T) {
	key, v := newKey(t)
	keys := &swappable{v}
	trust := &nodepods.Trust{Keys: keys, Verified: &nodepods.VerifiedMemo{}}
	names := api.DefaultResourceNames()
	p := signedPod(t, key, "a")
	for i := 0; i < 2; i++ { // the second read is the memo's
		if _, err := trust.Read(p, "n1", names); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	changed := p.DeepCopy()
	changed.Annotations[api.AnnotationAssignment] = strings.Replace(changed.Annotations[api.AnnotationAssignment], `"cores":10`, `"cores":5`, 1)
	if _, err := trust.Read(changed, "n1", names); !errors.Is(err, api.ErrBadSignature) {
		t.Fatalf("changed content under a remembered signature: err = %v, want ErrBadSignature", err)
	}
	other := p.DeepCopy()
	other.UID = "uid-b"
	if _, err := trust.Read(other, "n1", names); !errors.Is(err, api.ErrBadSignature) {
		t.Fatalf("the remembered signature on another pod: err = %v, want ErrBadSignature", err)
	}
	_, keys.v = newKey(t) // the scheduler's key retired
	if _, err := trust.Read(p, "n1", names); !errors.Is(err, api.ErrUnknownKey) {
		t.Fatalf("after the key was retired: err = %v, want ErrUnknownKey", err)
	}
}
