//go:build !linux

package records

import (
	"context"
	"errors"
)

// GrowthWatcher cuts grown regions back as they grow, on Linux (inotify); elsewhere GC
// passes do it.
type GrowthWatcher struct{}

// NewGrowthWatcher fails outside Linux.
func NewGrowthWatcher(func(path string, bytes int64)) (*GrowthWatcher, error) {
	return nil, errors.New("region growth is watched on Linux only")
}

func (w *GrowthWatcher) Watch(string) error  { return nil }
func (w *GrowthWatcher) Forget(string)       {}
func (w *GrowthWatcher) Sync([]string)       {}
func (w *GrowthWatcher) Watched() int        { return 0 }
func (w *GrowthWatcher) Run(context.Context) {}
