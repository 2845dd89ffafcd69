package api

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// KeySetVersion is the version of the key documents below.
const KeySetVersion = "v1"

// Data keys of the scheduler's Secret (private keys) and of the ConfigMap it publishes
// for the node agents (public keys only).
const (
	SigningKeysDataKey      = "signing-keys.json"
	VerificationKeysDataKey = "verification-keys.json"
)

// KeyEntry is one key of a key document: Key is the Ed25519 seed (32 bytes) in the
// Secret and the public key (32 bytes) in the ConfigMap; JSON carries it as base64.
type KeyEntry struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Key     []byte    `json:"key"`
}

// KeySet is the scheduler's keys, oldest first.
type KeySet struct {
	Version string     `json:"version"`
	Keys    []KeyEntry `json:"keys"`
}

// NewKeyEntry makes an entry from a private key, holding its seed.
func NewKeyEntry(priv ed25519.PrivateKey, created time.Time) KeyEntry {
	return KeyEntry{ID: KeyID(priv.Public().(ed25519.PublicKey)), Created: created.UTC().Truncate(time.Second), Key: priv.Seed()}
}

// DecodeKeySet parses a key document; private says whether entries hold seeds
// (the Secret) or public keys (the ConfigMap). Each entry's ID must match its key.
func DecodeKeySet(s string, private bool) (*KeySet, error) {
	field := VerificationKeysDataKey
	if private {
		field = SigningKeysDataKey
	}
	var ks KeySet
	if err := decodeStrict(s, &ks); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
	if ks.Version != KeySetVersion {
		return nil, fmt.Errorf("%w: %s: version %q (this build reads %q)", ErrUnsupportedVersion, field, ks.Version, KeySetVersion)
	}
	for i, k := range ks.Keys {
		if len(k.Key) != 32 {
			return nil, fmt.Errorf("%w: %s.keys[%d].key: %d bytes, want 32", ErrInvalid, field, i, len(k.Key))
		}
		pub := ed25519.PublicKey(k.Key)
		if private {
			pub = ed25519.NewKeyFromSeed(k.Key).Public().(ed25519.PublicKey)
		}
		if id := KeyID(pub); id != k.ID {
			return nil, fmt.Errorf("%w: %s.keys[%d].id: %q, the key's ID is %q", ErrInvalid, field, i, k.ID, id)
		}
	}
	sort.SliceStable(ks.Keys, func(a, b int) bool { return ks.Keys[a].Created.Before(ks.Keys[b].Created) })
	return &ks, nil
}

// EncodeKeySet serialises a key document.
func EncodeKeySet(ks *KeySet) (string, error) {
	ks.Version = KeySetVersion
	b, err := json.Marshal(ks)
	if err != nil {
		return "", fmt.Errorf("encode key set: %w", err)
	}
	return string(b), nil
}

// Public turns a private key document into the public one the agents read.
func (ks *KeySet) Public() *KeySet {
	out := &KeySet{Version: KeySetVersion}
	for _, k := range ks.Keys {
		pub := ed25519.NewKeyFromSeed(k.Key).Public().(ed25519.PublicKey)
		out.Keys = append(out.Keys, KeyEntry{ID: k.ID, Created: k.Created, Key: []byte(pub)})
	}
	return out
}

// Verifier builds a Verifier over a public key document.
func (ks *KeySet) Verifier() *Verifier {
	keys := make([]ed25519.PublicKey, len(ks.Keys))
	for i, k := range ks.Keys {
		keys[i] = ed25519.PublicKey(k.Key)
	}
	return NewVerifier(keys)
}

// Signing picks the key to sign with from a private key document: the newest key that
// has been published for at least activation (so that every agent's watch has it), or
// the oldest key when none has (a first key is used at once: nothing was signed before
// it). ok is false for an empty document.
func (ks *KeySet) Signing(now time.Time, activation time.Duration) (SigningKey, bool) {
	if len(ks.Keys) == 0 {
		return SigningKey{}, false
	}
	pick := ks.Keys[0]
	for _, k := range ks.Keys[1:] {
		if !k.Created.Add(activation).After(now) {
			pick = k
		}
	}
	return SigningKey{ID: pick.ID, Private: ed25519.NewKeyFromSeed(pick.Key)}, true
}
