package scale

import (
	"strings"
	"testing"
)

func TestCountWritesSumsUpdatesAndPatchesOfOneResource(t *testing.T) {
	text := `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.volcano.sh",resource="podgroups",scope="resource",subresource="",verb="PUT",version="v1beta1"} 120
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.volcano.sh",resource="podgroups",scope="resource",subresource="status",verb="PUT",version="v1beta1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="scheduling.volcano.sh",resource="podgroups",scope="resource",subresource="",verb="PATCH",version="v1beta1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.volcano.sh",resource="podgroups",scope="namespace",subresource="",verb="LIST",version="v1beta1"} 50
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PUT",version="v1"} 900
apiserver_request_total{code="200",component="apiserver",dry_run="",group="scheduling.volcano.sh",resource="podgroups",scope="resource",subresource="",verb="POST",version="v1beta1"} 11
`
	got, err := countWrites(strings.NewReader(text), "podgroups")
	if err != nil || got != 130 {
		t.Fatalf("countWrites = %v, %v; want 130", got, err)
	}
	if _, err := countWrites(strings.NewReader(`apiserver_request_total{resource="podgroups",verb="PATCH"} x`), "podgroups"); err == nil {
		t.Fatal("a bad value was accepted")
	}
}
