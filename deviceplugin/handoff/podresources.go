package handoff

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ErrKubelet is wrapped when the kubelet's PodResources API cannot be asked.
var ErrKubelet = errors.New("kubelet pod resources")

// KubeletPods is the kubelet's own table of pods and the device IDs it gave each
// container (the PodResources API).
type KubeletPods interface {
	List(ctx context.Context) ([]*podresourcesv1.PodResources, error)
}

// PodResourcesClient asks the kubelet's PodResources socket.
type PodResourcesClient struct {
	conn    *grpc.ClientConn
	client  podresourcesv1.PodResourcesListerClient
	timeout time.Duration
}

// DialPodResources connects lazily to the unix socket; calls fail until the kubelet serves it.
func DialPodResources(socket string, timeout time.Duration) (*PodResourcesClient, error) {
	conn, err := grpc.Dial("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrKubelet, socket, err)
	}
	return &PodResourcesClient{conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// List returns every pod the kubelet tracks with its containers' devices.
func (c *PodResourcesClient) List(ctx context.Context) ([]*podresourcesv1.PodResources, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w: List: %v", ErrKubelet, err)
	}
	return resp.GetPodResources(), nil
}

// Close releases the connection.
func (c *PodResourcesClient) Close() error { return c.conn.Close() }
