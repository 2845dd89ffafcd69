package scale

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBoundBySecondCountsTheWorkloadsPodsUpToTheLastBind(t *testing.T) {
	first := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	jobPod := func(name, job string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, Labels: map[string]string{"volcano.sh/job-name": job}}}
	}
	pods := []*corev1.Pod{jobPod("a-0", "a"), jobPod("a-1", "a"), jobPod("b-0", "b"), jobPod("late-0", "late"), jobPod("c-0", "c")}
	boundAt := map[string]time.Time{
		Namespace + "/a-0":    first.Add(500 * time.Millisecond), // within the first second: counted at 1 s
		Namespace + "/a-1":    first.Add(time.Second),            // at exactly 1 s
		Namespace + "/b-0":    first.Add(2300 * time.Millisecond),
		Namespace + "/late-0": first.Add(time.Second), // a job not of the workload (the restart's)
	}
	submitted := map[string]time.Time{"a": first, "b": first.Add(time.Second), "c": first}
	got := boundBySecond(pods, boundAt, submitted, first, 2.3)
	if want := []int{0, 2, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("bound by second %v, want %v", got, want)
	}
	if got := boundBySecond(pods, boundAt, submitted, first, 0); got != nil {
		t.Errorf("nothing bound gives %v, want none", got)
	}
}
