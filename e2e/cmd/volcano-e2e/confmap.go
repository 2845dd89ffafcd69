package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Where Volcano's CI keeps the scheduler's conf: its Helm release "integration" in
// volcano-system, the conf under the key its values name (scheduler_config_file). Several
// specs (preempt, reclaim, enqueue) edit the conf there to take an action out or set a
// plugin's argument, then expect the scheduler to run with the edit: in a cluster the
// kubelet projects the ConfigMap into the file the scheduler watches.
const (
	confNamespace = "volcano-system"
	confMapName   = "integration-scheduler-configmap"
	confKey       = "volcano-scheduler-ci.conf"
)

// ConfProjector does the kubelet's part for the scheduler's ConfigMap: it copies the
// conf from the ConfigMap into the file the scheduler was started with, whenever it
// changes. The scheduler watches that file's directory and reloads its conf on a write,
// as in a pod. Run owns the loop; Set changes the conf as a user would.
type ConfProjector struct {
	client kubernetes.Interface
	file   string
	// poll is how often the ConfigMap is read; the kubelet's sync, which Volcano's
	// specs hurry by annotating the scheduler pod, is at least as quick.
	poll time.Duration
}

// NewConfProjector creates volcano-system and the ConfigMap holding conf, and writes conf
// to file (the scheduler's --scheduler-conf; its directory should hold nothing else).
func NewConfProjector(ctx context.Context, client kubernetes.Interface, file, conf string) (*ConfProjector, error) {
	p := &ConfProjector{client: client, file: file, poll: 300 * time.Millisecond}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: confNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("namespace %s: %w", confNamespace, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: confNamespace, Name: confMapName},
		Data: map[string]string{confKey: conf}}
	if _, err := client.CoreV1().ConfigMaps(confNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", confNamespace, confMapName, err)
	}
	if err := p.write([]byte(conf)); err != nil {
		return nil, err
	}
	return p, nil
}

// Run copies the ConfigMap's conf into the file until ctx ends.
func (p *ConfProjector) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.poll):
		}
		if err := p.sync(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Projecting the scheduler's ConfigMap", "configmap", confNamespace+"/"+confMapName, "file", p.file)
		}
	}
}

// sync writes the ConfigMap's conf to the file if they differ.
func (p *ConfProjector) sync(ctx context.Context) error {
	cm, err := p.client.CoreV1().ConfigMaps(confNamespace).Get(ctx, confMapName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	want, ok := cm.Data[confKey]
	if !ok {
		return fmt.Errorf("configmap %s/%s has no key %s", confNamespace, confMapName, confKey)
	}
	have, err := os.ReadFile(p.file)
	if err == nil && bytes.Equal(have, []byte(want)) {
		return nil
	}
	klog.InfoS("Scheduler conf changed in its ConfigMap: writing it to the scheduler's file", "file", p.file)
	return p.write([]byte(want))
}

// write replaces the file in one rename, as the kubelet swaps a ConfigMap volume's
// contents, so the scheduler never reads half a conf.
func (p *ConfProjector) write(b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p.file), ".conf-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), p.file)
}

// Set puts conf in the ConfigMap and waits until the file holds it.
func (p *ConfProjector) Set(ctx context.Context, conf string) error {
	cm, err := p.client.CoreV1().ConfigMaps(confNamespace).Get(ctx, confMapName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data = map[string]string{confKey: conf}
	if _, err := p.client.CoreV1().ConfigMaps(confNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("configmap %s/%s: %w", confNamespace, confMapName, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		have, err := os.ReadFile(p.file)
		if err == nil && string(have) == conf {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the scheduler's conf file %s does not hold the ConfigMap's conf after 30 s", p.file)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.poll):
		}
	}
}
