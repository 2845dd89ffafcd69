package dra

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tessera-gpu/tessera/api"
)

// Taint keys. Both are NoSchedule: the scheduler places no new claim on the card (unless
// the claim tolerates the key), and claims already on it keep running, as the device
// plugin's unhealthy slots and cordons do.
const (
	// TaintUnhealthy marks a card the health monitor found unhealthy (a fatal XID, a
	// double-bit ECC error, a card NVML cannot query); the value is the reason. It goes
	// away when the card heals.
	TaintUnhealthy = "tessera.io/unhealthy"
	// TaintCordoned marks a card an administrator cordoned (kubectl tessera cordon); the
	// value is the administrator's reason.
	TaintCordoned = "tessera.io/cordoned"
)

// Taints are the card's taints: unhealthy (with reason) and cordoned, in that order.
func Taints(c api.Card, reason string) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	if !c.Healthy {
		if reason == "" {
			reason = "unhealthy"
		}
		out = append(out, resourceapi.DeviceTaint{Key: TaintUnhealthy, Value: LabelValue(reason),
			Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if c.Cordon != nil {
		out = append(out, resourceapi.DeviceTaint{Key: TaintCordoned, Value: LabelValue(c.Cordon.Reason),
			Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return out
}

// LabelValue turns free text ("fatal XID 79", an administrator's sentence) into what a
// taint value must be, a label value: at most 63 characters of [A-Za-z0-9._-], starting
// and ending with a letter or digit. Every other character becomes '-', runs of them
// collapse, and the text is cut to fit. Text with no letter or digit gives "".
func LabelValue(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		ok := r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_')
		if ok {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 63 {
			break
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.TrimFunc(v, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
}
