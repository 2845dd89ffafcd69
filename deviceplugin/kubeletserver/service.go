package kubeletserver

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var _ pluginapi.DevicePluginServer = (*service)(nil)

// service implements pluginapi.DevicePluginServer for one Server.
type service struct {
	pluginapi.UnimplementedDevicePluginServer
	s *Server
}

func (v *service) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return pluginOptions(), nil
}

// ListAndWatch sends every slot with its card's health, then again after each change.
func (v *service) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	changes, cancel := v.s.reg.Subscribe()
	defer cancel()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices(v.s)}); err != nil {
			return fmt.Errorf("send device list: %w", err)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changes:
		}
	}
}

func devices(s *Server) []*pluginapi.Device {
	slots := s.reg.Slots()
	out := make([]*pluginapi.Device, len(slots))
	for i, sl := range slots {
		d := &pluginapi.Device{ID: sl.ID, Health: pluginapi.Healthy}
		if !sl.Healthy {
			d.Health = pluginapi.Unhealthy
		}
		if s.opts.ReportNUMA && sl.NUMA >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(sl.NUMA)}}}
		}
		out[i] = d
	}
	klog.V(4).InfoS("Sending device list", "slots", len(out))
	return out
}

func (v *service) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids, err := v.s.preferred(ctx, cr)
		if err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (v *service) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return v.s.handler.Allocate(ctx, req)
}

func (v *service) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if err := v.s.handler.PreStart(ctx, req.GetDevicesIds()); err != nil {
		return nil, err
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}
