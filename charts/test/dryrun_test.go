package charttest

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// EnvDryRunKubeconfig names a kubeconfig of a real API server (the e2e harness's
// kube-apiserver + etcd, or any cluster) to apply the rendered objects to with
// server-side dry-run, so that schema errors the typed conversion cannot see fail.
const EnvDryRunKubeconfig = "TESSERA_CHART_KUBECONFIG"

func TestRenderedObjectsPassServerSideDryRun(t *testing.T) {
	kubeconfig := os.Getenv(EnvDryRunKubeconfig)
	if kubeconfig == "" {
		apiserver := os.Getenv(EnvKubeAPIServer)
		if apiserver == "" {
			t.Skip("SKIPPED: server-side dry-run needs a real API server: set " + EnvDryRunKubeconfig +
				" to a kubeconfig, or " + EnvKubeAPIServer + " to a kube-apiserver binary (with etcd on PATH; the e2e harness" +
				" builds one into e2e/.cache/bin). e2e/ exports no control-plane helper to import.")
		}
		kubeconfig = startControlPlane(t, apiserver)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, values := range []string{"", "testdata/custom-values.yaml", "testdata/admission-values.yaml"} {
		// "default" exists on every API server; dry-run cannot create a namespace for later objects.
		r, err := Render(t, values, "default")
		if err != nil {
			t.Fatalf("render %q: %v", values, err)
		}
		for _, o := range r.Objs {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) && gvk.Group == "monitoring.coreos.com" {
				t.Logf("%q: %s/%s not checked: the API server has no ServiceMonitor CRD", values, gvk.Kind, o.GetName())
				continue
			}
			if err != nil {
				t.Errorf("%q: %s: %v", values, gvk, err)
				continue
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			_, err = ri.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			if err != nil {
				t.Errorf("%q: server rejects %s %s: %v", values, gvk.Kind, o.GetName(), err)
			}
		}
	}
}
