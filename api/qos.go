package api

import "fmt"

// QoSClass is the service class of a container on a shared card.
type QoSClass string

const (
	// QoSBestEffort runs uncapped and takes whatever compute is free.
	QoSBestEffort QoSClass = "best-effort"
	// QoSFixedShare is always capped at its SM limit.
	QoSFixedShare QoSClass = "fixed-share"
	// QoSBurstShare is capped at its SM limit only while another container uses the card.
	QoSBurstShare QoSClass = "burst-share"
)

// DefaultQoS applies when a pod names no class.
const DefaultQoS = QoSFixedShare

// ParseQoSClass validates a class name; the empty string yields DefaultQoS.
func ParseQoSClass(s string) (QoSClass, error) {
	switch QoSClass(s) {
	case "":
		return DefaultQoS, nil
	case QoSBestEffort, QoSFixedShare, QoSBurstShare:
		return QoSClass(s), nil
	}
	return "", fmt.Errorf("%w: qos %q: want %s, %s or %s", ErrInvalid, clip(s), QoSBestEffort, QoSFixedShare, QoSBurstShare)
}

// Policy is a scoring policy for nodes or cards.
type Policy string

const (
	// PolicyBinpack fills used nodes and cards first, keeping others whole.
	PolicyBinpack Policy = "binpack"
	// PolicySpread prefers idle nodes and cards, trading density for isolation.
	PolicySpread Policy = "spread"
	// PolicyTopology ranks by the links between a pod's cards: for cards, a single
	// card goes where taking it hurts the node's remaining links least; for nodes,
	// the node whose best card set is best connected wins.
	PolicyTopology Policy = "topology"
	// PolicyIdleOnly is a card policy only (HAMi's mutex): the pod takes only cards no
	// other pod has booked, and while it holds them no other pod joins. Among idle
	// cards it chooses as binpack does.
	PolicyIdleOnly Policy = "idle-only"
)

// ParsePolicy validates a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case PolicyBinpack, PolicySpread, PolicyTopology:
		return Policy(s), nil
	}
	return "", fmt.Errorf("%w: policy %q: want %s, %s or %s", ErrInvalid, clip(s), PolicyBinpack, PolicySpread, PolicyTopology)
}

// ParseCardPolicy validates a card policy name: a node policy, or idle-only.
func ParseCardPolicy(s string) (Policy, error) {
	if Policy(s) == PolicyIdleOnly {
		return PolicyIdleOnly, nil
	}
	if p, err := ParsePolicy(s); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: policy %q: want %s, %s, %s or %s", ErrInvalid, clip(s), PolicyBinpack, PolicySpread,
		PolicyTopology, PolicyIdleOnly)
}

// HoldsIdleOnly reports whether a pod with these annotations holds its cards alone
// (AnnotationCardPolicy idle-only): the book reads it off every placed pod, since the
// assignment does not record it. idle-only is never a plugin default, so the pod's own
// annotation is the whole answer.
func HoldsIdleOnly(ann map[string]string) bool {
	return ann[AnnotationCardPolicy] == string(PolicyIdleOnly)
}
