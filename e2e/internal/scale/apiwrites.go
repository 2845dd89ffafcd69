package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// PodGroupWrites is how many requests that change a PodGroup (update, patch, on the
// object or its status) the API server has served since it started, from its own
// apiserver_request_total. The scheduler writes a PodGroup's status at each session's
// close when it differs from what it read at the session's open.
func PodGroupWrites(ctx context.Context, client kubernetes.Interface) (float64, error) {
	b, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("API server metrics: %w", err)
	}
	return countWrites(bytes.NewReader(b), "podgroups")
}

// countWrites sums apiserver_request_total over the PUT (update) and PATCH requests of
// one resource, in Prometheus text exposition (the metric's verb label is the HTTP one).
func countWrites(r io.Reader, resource string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		if !strings.Contains(line, `verb="PUT"`) && !strings.Contains(line, `verb="PATCH"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("apiserver_request_total: value in %q", line)
		}
		sum += v
	}
	return sum, sc.Err()
}
