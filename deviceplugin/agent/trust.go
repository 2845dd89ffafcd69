package agent

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tessera-gpu/tessera/assignkeys"
	"github.com/tessera-gpu/tessera/deviceplugin/config"
	"github.com/tessera-gpu/tessera/deviceplugin/nodepods"
)

// startTrust follows the scheduler's published keys when the configuration names them.
// Without them the agent still refuses assignments beyond what a pod requests, but it
// cannot tell who wrote one: it says so once, loudly.
func startTrust(ctx context.Context, cfg *config.Config, client kubernetes.Interface) (*nodepods.Trust, error) {
	t := &nodepods.Trust{AllowUnsigned: cfg.UnsignedAssignments == config.UnsignedAllow}
	if cfg.AssignmentKeys == "" {
		klog.InfoS("WARNING: card assignments are not verified (assignmentKeys is empty): anyone who can write a pod's annotations can choose its cards and limits on this node")
		return t, nil
	}
	ref, err := assignkeys.ParseRef("assignmentKeys", cfg.AssignmentKeys)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	w := &assignkeys.Watcher{Client: client, ConfigMap: ref}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	t.Keys = w
	klog.InfoS("Card assignments are verified against the scheduler's keys", "configMap", ref, "unsignedAssignments", cfg.UnsignedAssignments)
	return t, nil
}
