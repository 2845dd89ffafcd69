package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"volcano.sh/volcano/pkg/kube"

	"github.com/tessera-gpu/tessera/assignkeys"
	"github.com/tessera-gpu/tessera/plugins/vgpu"
)

// signingFlags are Tessera's own flags: where the scheduler keeps the keys that sign
// each card assignment, and where it publishes the public halves for the node agents.
type signingFlags struct {
	secret, configMap string
	rotation          time.Duration
	activation        time.Duration
}

func (f *signingFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.secret, "tessera-signing-secret", "",
		"NAMESPACE/NAME of the Secret holding the keys that sign card assignments (created when missing). Empty: assignments are unsigned, and node agents that verify refuse them.")
	fs.StringVar(&f.configMap, "tessera-signing-keys-configmap", "",
		"NAMESPACE/NAME of the ConfigMap where the public keys are published for the node agents (required with --tessera-signing-secret).")
	fs.DurationVar(&f.rotation, "tessera-signing-rotation", assignkeys.DefaultRotation,
		"Age at which a new signing key replaces the newest; the replaced key stays published as long again. 0: never rotate.")
	fs.DurationVar(&f.activation, "tessera-signing-activation", assignkeys.DefaultActivation,
		"How long a new key is published before it signs, so that every node agent has read it.")
}

// start reads (or creates) the keys before the scheduler starts, and keeps them synced.
// It returns nil, nil when signing is off.
func (f *signingFlags) start(ctx context.Context, opt kube.ClientOptions) (vgpu.Signer, error) {
	if f.secret == "" && f.configMap == "" {
		klog.InfoS("Card assignments are not signed (--tessera-signing-secret is empty): node agents that verify will refuse them")
		return nil, nil
	}
	secret, err := assignkeys.ParseRef("--tessera-signing-secret", f.secret)
	if err != nil {
		return nil, err
	}
	cm, err := assignkeys.ParseRef("--tessera-signing-keys-configmap", f.configMap)
	if err != nil {
		return nil, err
	}
	cfg, err := kube.BuildConfig(opt)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	k := &assignkeys.Keyring{Secrets: client.CoreV1(), ConfigMaps: client.CoreV1(), Secret: secret, ConfigMap: cm,
		Rotation: f.rotation, Activation: f.activation}
	// The API server may still be starting (a control plane brought up together):
	// retry for a while rather than run without keys.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err = k.Sync(ctx)
		if err == nil || time.Now().After(deadline) {
			break
		}
		klog.ErrorS(err, "Reading the assignment signing keys; retrying")
		time.Sleep(2 * time.Second)
	}
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	go k.Run(ctx, assignkeys.DefaultResync)
	return k, nil
}
