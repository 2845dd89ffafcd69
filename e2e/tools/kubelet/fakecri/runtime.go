package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
)

var (
	_ runtimeapi.RuntimeServiceServer = (*runtime)(nil)
	_ runtimeapi.ImageServiceServer   = (*runtime)(nil)
)

// runtime is the fake CRI with the container calls intercepted; every other call goes
// to the embedded fake unchanged.
type runtime struct {
	*fake.RemoteRuntime
	recordDir, node string
	// cdiDirs are the CDI spec directories; none means CDI is off, as with containerd's
	// enable_cdi = false, and the kubelet's CDI device names are only recorded.
	cdiDirs []string
	// host is what decides the swap and huge page parts of each container's reported
	// resources (resources.go).
	host cgroupHost

	mu      sync.Mutex
	runTime map[string]time.Duration // container ID -> how long it runs (absent: until stopped)
}

func newRuntime(f *fake.RemoteRuntime, recordDir, node string, cdiDirs ...string) *runtime {
	f.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	// The kubelet's config says cgroupfs too; answering keeps it from guessing.
	f.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	// Pulled images get this size; the kubelet's image GC divides by image sizes.
	f.ImageService.SetFakeImageSize(1 << 20)
	return &runtime{RemoteRuntime: f, recordDir: recordDir, node: node, cdiDirs: cdiDirs, host: detectCgroupHost(),
		runTime: map[string]time.Duration{}}
}

// CreateContainer creates the container in the fake, records what the kubelet passed (with
// the edits of its CDI devices applied) and creates its log file. A CDI device that no
// spec defines fails the call, as it fails in a CDI-enabled runtime.
func (r *runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	var edits []cdiEdits
	if len(r.cdiDirs) > 0 {
		var names []string
		for _, d := range req.GetConfig().GetCDIDevices() {
			names = append(names, d.GetName())
		}
		var err error
		if edits, err = resolveCDI(r.cdiDirs, names); err != nil {
			klog.ErrorS(err, "Refusing to create the container", "pod", req.GetSandboxConfig().GetMetadata().GetName())
			return nil, err
		}
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	id := resp.ContainerId
	logPath := ""
	if dir, rel := req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath(); dir != "" && rel != "" {
		logPath = filepath.Join(dir, rel)
		if err := createLog(logPath); err != nil {
			klog.ErrorS(err, "Cannot create the container log", "container", id)
		}
	}
	r.RuntimeService.Lock()
	if c := r.RuntimeService.Containers[id]; c != nil {
		c.LogPath = logPath
		// What containerd reports for the container's resources from the start.
		c.Resources = r.host.createdResources(req.GetConfig())
	}
	r.RuntimeService.Unlock()
	if d, ok := sleepTime(req.GetConfig()); ok {
		r.mu.Lock()
		r.runTime[id] = d
		r.mu.Unlock()
	}
	rec := newRecord(id, r.node, req)
	rec.apply(edits)
	rec.readLimitsFile()
	if err := rec.write(r.recordDir); err != nil {
		klog.ErrorS(err, "Cannot record the container", "container", id)
	}
	klog.V(2).InfoS("Container created", "pod", rec.Namespace+"/"+rec.Pod, "container", rec.Container, "id", id)
	return resp, nil
}

// StartContainer starts the container in the fake; a `sleep N` container exits with
// status 0 after N seconds.
func (r *runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	d, ok := r.runTime[req.ContainerId]
	r.mu.Unlock()
	if ok {
		time.AfterFunc(d, func() { r.exit(req.ContainerId) })
	}
	return resp, nil
}

// UpdateContainerResources merges the kubelet's new resources into what the container
// reports, as containerd merges them into the container's spec; the fake's own
// UpdateContainerResources records the call and changes nothing.
func (r *runtime) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	if _, err := r.RemoteRuntime.UpdateContainerResources(ctx, req); err != nil {
		return nil, err
	}
	s := r.RuntimeService
	s.Lock()
	defer s.Unlock()
	c := s.Containers[req.GetContainerId()]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	c.Resources = r.host.updatedResources(c.Resources, req.GetLinux())
	c.LinuxResources = c.Resources.GetLinux()
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// RemoveContainer removes the container from the fake.
func (r *runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	delete(r.runTime, req.ContainerId)
	r.mu.Unlock()
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

// exit ends a running container as its command finishing does.
func (r *runtime) exit(id string) {
	s := r.RuntimeService
	s.Lock()
	defer s.Unlock()
	c := s.Containers[id]
	if c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return
	}
	c.State, c.ExitCode, c.Reason = runtimeapi.ContainerState_CONTAINER_EXITED, 0, "Completed"
	c.FinishedAt = time.Now().UnixNano()
}

// forgetCalls empties the fakes' call logs now and then: they exist for unit-test
// assertions and would otherwise grow with every PLEG relist.
func (r *runtime) forgetCalls(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.RuntimeService.Lock()
		r.RuntimeService.Called = r.RuntimeService.Called[:0]
		r.RuntimeService.Unlock()
		r.ImageService.Lock()
		r.ImageService.Called = r.ImageService.Called[:0]
		r.ImageService.Unlock()
	}
}

func createLog(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// sleepTime reads `sleep N` (also `sh -c "sleep N"`) from the container's command and
// arguments. Anything else, `sleep infinity` included, runs until stopped.
func sleepTime(c *runtimeapi.ContainerConfig) (time.Duration, bool) {
	words := strings.Fields(strings.Join(append(append([]string{}, c.GetCommand()...), c.GetArgs()...), " "))
	if len(words) >= 3 && (words[0] == "sh" || words[0] == "/bin/sh") && words[1] == "-c" {
		words = words[2:]
	}
	if len(words) != 2 || words[0] != "sleep" {
		return 0, false
	}
	s, err := strconv.ParseFloat(strings.Trim(words[1], `"'`), 64)
	if err != nil || math.IsInf(s, 0) || math.IsNaN(s) || s < 0 || s > 1e6 {
		return 0, false
	}
	return time.Duration(s * float64(time.Second)), true
}
