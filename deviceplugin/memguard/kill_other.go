//go:build !linux

package memguard

import (
	"errors"

	"k8s.io/apimachinery/pkg/types"
)

// PidfdKiller stops nothing outside Linux.
type PidfdKiller struct{ ProcRoot string }

// Kill implements Killer.
func (PidfdKiller) Kill(int, types.UID) error { return errors.New("stopping processes needs Linux") }
