package vgpu

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	schedulingv1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	hamivgpu "volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/vgpu"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/deviceshare"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder"
	"volcano.sh/volcano/pkg/scheduler/plugins/predicates"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

const (
	benchNodes    = 1000
	benchCards    = 8
	benchTasks    = 500
	benchGangSize = 4
	benchCardMiB  = 40960
)

// BenchmarkSession measures one scheduling session (open, allocate, close) on a
// synthetic cluster of 1,000 nodes x 8 cards with 500 pending vGPU tasks in gangs of
// four, in one run: no device plugin at all, Volcano v1.14.1's deviceshare with
// VGPUEnable, and Tessera's vgpu plugin (with and without the queue share, binpack and
// spread, and signing every assignment). Besides time it reports how many tasks were placed and on how many distinct
// cards.
//
// Volcano v1.14's deviceshare PATCHes each placed pod's annotations through the
// session's client from inside the allocate event. Here that client is the mock cache's
// in-memory clientset, which holds the pods, so its cost is a lower bound of what the
// same PATCH costs against a real API server.
func BenchmarkSession(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	key := api.NewSigningKey(priv)
	for _, mode := range []string{"none", "tessera", "tessera-signed", "tessera-noqueueshare", "tessera-spread", "deviceshare"} {
		b.Run(mode, func(b *testing.B) {
			var placed, cards, nodes int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				testSched = NewScheduler()
				if mode == "tessera-signed" {
					// Every assignment signed, as vc-scheduler does with signing on.
					testSched.signer = staticSigner{key, true}
				}
				// Volcano v1.14 builds a node's device state when the node enters the
				// cache, and only for the device kinds enabled then.
				hamivgpu.VGPUEnable = mode == "deviceshare"
				sc := benchCache(b, benchNodes, benchTasks)
				stop := make(chan struct{})
				sc.Run(stop)
				framework.CleanupPluginBuilders()
				registerBenchPlugins()
				t := benchTiers(mode)
				b.StartTimer()

				ssn := framework.OpenSession(sc, t, nil)
				act := allocate.New()
				act.Initialize()
				act.Execute(ssn)
				act.UnInitialize()
				b.StopTimer()
				placed, cards, nodes = countPlacements(b, ssn, mode, sc)
				framework.CloseSession(ssn)
				close(stop)
				hamivgpu.VGPUEnable = false
				b.StartTimer()
			}
			b.ReportMetric(float64(placed), "tasks-placed")
			b.ReportMetric(float64(cards), "cards-used")
			b.ReportMetric(float64(nodes), "nodes-used")
		})
	}
}

func registerBenchPlugins() {
	for name, fn := range map[string]framework.PluginBuilder{gang.PluginName: gang.New, proportion.PluginName: proportion.New,
		predicates.PluginName: predicates.New, nodeorder.PluginName: nodeorder.New, deviceshare.PluginName: deviceshare.New, PluginName: newPlugin} {
		framework.RegisterPluginBuilder(name, fn)
	}
}

func benchTiers(mode string) []conf.Tier {
	names := []string{gang.PluginName, proportion.PluginName, predicates.PluginName, nodeorder.PluginName}
	var opts []conf.PluginOption
	for _, n := range names {
		opts = append(opts, conf.PluginOption{Name: n})
	}
	switch mode {
	case "deviceshare":
		opts = append(opts, conf.PluginOption{Name: deviceshare.PluginName, Arguments: framework.Arguments{
			deviceshare.VGPUEnable: true, deviceshare.SchedulePolicyArgument: "binpack", deviceshare.ScheduleWeight: 10}})
	case "tessera", "tessera-signed":
		opts = append(opts, conf.PluginOption{Name: PluginName})
	case "tessera-noqueueshare":
		opts = append(opts, conf.PluginOption{Name: PluginName, Arguments: framework.Arguments{pluginargs.KeyQueueShare: false}})
	case "tessera-spread":
		opts = append(opts, conf.PluginOption{Name: PluginName, Arguments: framework.Arguments{pluginargs.KeyNodePolicy: "spread"}})
	}
	for i := range opts {
		plugins.ApplyPluginConfDefaults(&opts[i])
	}
	return []conf.Tier{{Plugins: opts}}
}

// benchCache builds the cluster. Every node carries both Tessera's inventory and the
// HAMi registration, so each plugin reads its own format of the same cards.
func benchCache(b *testing.B, nodes, tasks int) *cache.SchedulerCache {
	sc := cache.NewCustomMockSchedulerCache("bench", util.NewFakeBinder(tasks*2), util.NewFakeEvictor(0),
		&util.FakeStatusUpdater{}, nil, &record.FakeRecorder{})
	hb := time.Now().UTC().Format(time.RFC3339)
	for n := 0; n < nodes; n++ {
		name := fmt.Sprintf("node-%04d", n)
		node := gpuNode(name, benchCards, "NVIDIA-A100", benchCardMiB)
		node.Annotations[api.AnnotationHeartbeat] = hb
		var reg []api.VolcanoCard
		for c := 0; c < benchCards; c++ {
			reg = append(reg, api.VolcanoCard{UUID: fmt.Sprintf("GPU-%s-%d", name, c), Count: 10, MemoryMiB: benchCardMiB, Type: "NVIDIA-A100", Healthy: true, Mode: "hami-core"})
		}
		s, _ := api.EncodeVolcanoNodeRegister(reg)
		node.Annotations[api.VolcanoNodeRegister] = s
		// The sixth field is the sharing mode, which Volcano v1.14 requires. "Requesting"
		// within the last minute: Volcano reads the node without patching it.
		node.Annotations[api.VolcanoNodeHandshake] = "Requesting_" + time.Now().Format("2006.01.02 15:04:05")
		sc.AddOrUpdateNode(node)
	}
	sc.AddQueueV1beta1(util.BuildQueue("q1", 1, nil))
	for g := 0; g < tasks/benchGangSize; g++ {
		pg := fmt.Sprintf("job-%03d", g)
		sc.AddPodGroupV1beta1(util.BuildPodGroup(pg, "ns", "q1", benchGangSize, nil, schedulingv1.PodGroupInqueue))
		for m := 0; m < benchGangSize; m++ {
			i := g*benchGangSize + m
			var p *corev1.Pod
			switch i % 5 {
			case 0:
				p = vgpuPod(fmt.Sprintf("%s-%d", pg, m), pg, 2, 20000, 50, nil)
			case 1:
				p = vgpuPod(fmt.Sprintf("%s-%d", pg, m), pg, 1, benchCardMiB, 100, nil)
			default:
				p = vgpuPod(fmt.Sprintf("%s-%d", pg, m), pg, 1, 10000, 25, nil)
			}
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
			sc.AddPod(p)
			// deviceshare PATCHes the pod through the session's client: it must exist there.
			if _, err := sc.Client().CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return sc
}

func countPlacements(b *testing.B, ssn *framework.Session, mode string, sc *cache.SchedulerCache) (placed, cards, nodes int) {
	cardSet, nodeSet := map[string]bool{}, map[string]bool{}
	for _, job := range ssn.Jobs {
		for _, task := range job.Tasks {
			if task.NodeName == "" {
				continue
			}
			placed++
			nodeSet[task.NodeName] = true
			if s, ok := task.Pod.Annotations[api.AnnotationAssignment]; ok {
				a, _ := api.DecodeAssignment(s)
				for _, c := range a.Containers {
					for _, card := range c.Cards {
						cardSet[card.UUID] = true
					}
				}
			}
		}
	}
	if strings.HasPrefix(mode, "deviceshare") {
		// deviceshare's choice lives only in the annotations it PATCHed onto the pods.
		pods, err := sc.Client().CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range pods.Items {
			ids, ok := p.Annotations[api.VolcanoAssignedIDs]
			if !ok {
				continue
			}
			per, err := api.DecodeVolcanoPodDevices(ids)
			if err != nil {
				b.Fatalf("pod %s: deviceshare wrote %s=%q: %v", p.Name, api.VolcanoAssignedIDs, ids, err)
			}
			for _, c := range per {
				for _, card := range c {
					cardSet[card.UUID] = true
				}
			}
		}
	}
	return placed, len(cardSet), len(nodeSet)
}
