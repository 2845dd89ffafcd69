package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// namespaceReaderEnv is a cluster seen by an account that may only get and list pods
// in team-a, as RBAC would answer it: Forbidden for Nodes and for every other scope.
func namespaceReaderEnv(out, errOut *bytes.Buffer, objs ...runtime.Object) Env {
	client := fake.NewSimpleClientset(objs...)
	forbid := func(resource string) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() == "team-a" {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "",
				errors.New(`User "alice" cannot list resource at the cluster scope`))
		}
	}
	client.PrependReactor("list", "nodes", forbid("nodes"))
	client.PrependReactor("get", "nodes", forbid("nodes"))
	client.PrependReactor("list", "pods", forbid("pods"))
	return Env{Stdout: out, Stderr: errOut, Now: func() time.Time { return now },
		Client: func(_ string, o *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
			return client, "team-a", nil
		}}
}

func TestANamespaceReaderGetsItsPodsCardsWithAWarning(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Run(context.Background(), namespaceReaderEnv(&out, &errOut, cluster(t)...), "pod", []string{"train-0", "-o", "json"})
	if err != nil {
		t.Fatalf("tessera pod train-0 as a namespace reader: %v\nstderr: %s", err, errOut.String())
	}
	var v PodView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Namespace != "team-a" || len(v.Containers) == 0 || len(v.Containers[0].Cards) == 0 || v.Containers[0].Cards[0].UUID == "" {
		t.Errorf("pod view without Nodes: %+v", v)
	}
	for _, want := range []string{"warning: partial view: your account may not list Nodes", "only namespace team-a is read"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
}

func TestAViewMadeOfNodesSaysWhichPermissionItLacks(t *testing.T) {
	for _, cmd := range [][]string{{"nodes"}, {"explain", "train-0"}, {"report", "-o", "json"}} {
		var out, errOut bytes.Buffer
		err := Run(context.Background(), namespaceReaderEnv(&out, &errOut, cluster(t)...), cmd[0], cmd[1:])
		if err == nil || !strings.Contains(err.Error(), "may not list") || !strings.Contains(err.Error(), "tessera-viewer") {
			t.Errorf("tessera %v as a namespace reader: %v; want an error naming the missing permission and the viewer role", cmd, err)
		}
		if out.Len() != 0 {
			t.Errorf("tessera %v printed a view without Nodes:\n%s", cmd, out.String())
		}
	}
}

func TestAllNamespacesFailsInsteadOfFallingBack(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Run(context.Background(), namespaceReaderEnv(&out, &errOut, cluster(t)...), "pod", []string{"train-0", "-A"})
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "list pods") {
		t.Errorf("tessera pod -A as a namespace reader: %v; want the Forbidden from listing every namespace's pods", err)
	}
}

func TestYAMLOutputCarriesWhatJSONDoes(t *testing.T) {
	asJSON := mustRun(t, cluster(t), "nodes", "-o", "json")
	asYAML := mustRun(t, cluster(t), "nodes", "-o", "yaml")
	var a, b NodeCardsList
	if err := json.Unmarshal([]byte(asJSON), &a); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(asYAML), &b); err != nil {
		t.Fatalf("-o yaml does not read back: %v\n%s", err, asYAML)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if len(a.Items) == 0 || !bytes.Equal(ja, jb) {
		t.Errorf("-o yaml and -o json differ:\n%s\n%s", ja, jb)
	}
}

// kubectl's client flags reach the client configuration.
func TestKubectlClientFlagsReachTheOverrides(t *testing.T) {
	var got *clientcmd.ConfigOverrides
	var out, errOut bytes.Buffer
	env := testEnv(t, &out, &errOut, cluster(t)...)
	inner := env.Client
	env.Client = func(k string, o *clientcmd.ConfigOverrides) (kubernetes.Interface, string, error) {
		got = o
		return inner(k, o)
	}
	args := []string{"--as", "alice", "--as-group", "team-a", "--token", "t0k", "-s", "https://10.0.0.1:6443",
		"--insecure-skip-tls-verify", "--context", "prod", "--user", "u", "--cluster", "c", "--request-timeout", "5s", "-n", "team-a"}
	if err := Run(context.Background(), env, "nodes", args); err != nil {
		t.Fatal(err)
	}
	if got.AuthInfo.Impersonate != "alice" || len(got.AuthInfo.ImpersonateGroups) != 1 || got.AuthInfo.Token != "t0k" ||
		got.ClusterInfo.Server != "https://10.0.0.1:6443" || !got.ClusterInfo.InsecureSkipTLSVerify || got.CurrentContext != "prod" ||
		got.Context.AuthInfo != "u" || got.Context.Cluster != "c" || got.Timeout != "5s" || got.Context.Namespace != "team-a" {
		t.Errorf("overrides %+v", got)
	}
}
