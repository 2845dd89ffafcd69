package api

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationAssignmentSignature holds the scheduler's Ed25519 signature over the pod's
// UID, its node and its assignment annotations: the node agent honours an assignment
// only when it verifies against a key the scheduler published. Tenants can write pod
// annotations; they cannot sign.
const AnnotationAssignmentSignature = Prefix + "assignment-signature"

// signatureVersion prefixes every signature value and every signed message.
const signatureVersion = "v1"

// Signature errors, each wrapped with what was found.
var (
	// ErrUnsigned: the pod carries an assignment but no signature.
	ErrUnsigned = errors.New("assignment is not signed")
	// ErrBadSignature: the signature does not verify, or cannot be read.
	ErrBadSignature = errors.New("assignment signature does not verify")
	// ErrUnknownKey: the signature names a key the scheduler has not published (or retired).
	ErrUnknownKey = errors.New("assignment is signed with an unknown key")
)

// SigningKey is one of the scheduler's private keys.
type SigningKey struct {
	ID      string
	Private ed25519.PrivateKey
}

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// NewSigningKey wraps an Ed25519 private key with its ID.
func NewSigningKey(priv ed25519.PrivateKey) SigningKey {
	return SigningKey{ID: KeyID(priv.Public().(ed25519.PublicKey)), Private: priv}
}

// signedMessage is what a signature covers: the pod's UID and node and the exact
// annotation values the agents read (Tessera's assignment and Volcano's card list, either
// possibly empty), each length-prefixed so that no two inputs share a message.
func signedMessage(uid, node, assignment, volcanoIDs string) []byte {
	var b []byte
	b = append(b, "tessera.io/assignment-signature "+signatureVersion+"\n"...)
	for _, s := range []string{uid, node, assignment, volcanoIDs} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// Sign returns the signature annotation value for a pod's assignment.
func (k SigningKey) Sign(uid, node, assignment, volcanoIDs string) string {
	sig := ed25519.Sign(k.Private, signedMessage(uid, node, assignment, volcanoIDs))
	return signatureVersion + "." + k.ID + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// SignPod signs the assignment annotations the pod carries for node.
func (k SigningKey) SignPod(pod *corev1.Pod, node string) string {
	return k.Sign(string(pod.UID), node, pod.Annotations[AnnotationAssignment], pod.Annotations[VolcanoAssignedIDs])
}

// Verifier checks assignment signatures against the scheduler's published keys. A nil
// or empty Verifier verifies nothing.
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// NewVerifier builds a Verifier over public keys, each named by KeyID.
func NewVerifier(keys []ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for _, k := range keys {
		v.keys[KeyID(k)] = k
	}
	return v
}

// Len is how many keys the Verifier accepts.
func (v *Verifier) Len() int {
	if v == nil {
		return 0
	}
	return len(v.keys)
}

// VerifyPod checks the pod's signature over its assignment annotations for node.
func (v *Verifier) VerifyPod(pod *corev1.Pod, node string) error {
	sig, ok := pod.Annotations[AnnotationAssignmentSignature]
	if !ok {
		return fmt.Errorf("%w: the pod has no %s annotation", ErrUnsigned, AnnotationAssignmentSignature)
	}
	return v.Verify(sig, string(pod.UID), node, pod.Annotations[AnnotationAssignment], pod.Annotations[VolcanoAssignedIDs])
}

// Verify checks one signature value.
func (v *Verifier) Verify(sig, uid, node, assignment, volcanoIDs string) error {
	version, rest, ok1 := strings.Cut(sig, ".")
	id, b64, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || version != signatureVersion {
		return fmt.Errorf("%w: %s: %q is not %s.<key id>.<signature>", ErrBadSignature, AnnotationAssignmentSignature, clip(sig), signatureVersion)
	}
	if v.Len() == 0 {
		return fmt.Errorf("%w: %s names key %q and this agent has no published key yet", ErrUnknownKey, AnnotationAssignmentSignature, clip(id))
	}
	pub, ok := v.keys[id]
	if !ok {
		return fmt.Errorf("%w: %s names key %q; published keys: %s", ErrUnknownKey, AnnotationAssignmentSignature, clip(id), strings.Join(v.ids(), ","))
	}
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: %s: the signature is not %d bytes of unpadded base64url", ErrBadSignature, AnnotationAssignmentSignature, ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, signedMessage(uid, node, assignment, volcanoIDs), raw) {
		return fmt.Errorf("%w: key %s did not sign this pod's assignment for node %q (it was written or changed by someone else, or copied from another pod)",
			ErrBadSignature, id, node)
	}
	return nil
}

func (v *Verifier) ids() []string {
	out := make([]string, 0, len(v.keys))
	for id := range v.keys {
		out = append(out, id)
	}
	return out
}

// clip shortens a hostile value before it goes into a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
