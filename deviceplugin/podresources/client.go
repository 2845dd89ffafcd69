// Package podresources asks the kubelet's PodResources API which pods and containers
// hold which device IDs: the kubelet's own table, written before PreStartContainer.
package podresources

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

// Client asks the kubelet's PodResources socket.
type Client struct {
	conn    *grpc.ClientConn
	client  podresourcesv1.PodResourcesListerClient
	timeout time.Duration
}

// Dial connects lazily to the unix socket; calls fail until the kubelet serves it.
func Dial(socket string, timeout time.Duration) (*Client, error) {
	conn, err := grpc.Dial("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %v", ErrKubelet, socket, err)
	}
	return &Client{conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// List returns every pod the kubelet tracks with its containers' devices.
func (c *Client) List(ctx context.Context) ([]*podresourcesv1.PodResources, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w: List: %v", ErrKubelet, err)
	}
	return resp.GetPodResources(), nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }
