package scale

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTicks = 100

// CPUTime is a process's user + system CPU time so far, from /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its ')' are fixed.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// Memory is a process's resident set now and at its peak, MiB, from /proc/<pid>/status.
func Memory(pid int) (rss, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak, nil
}

// LoadAverage is the one-minute load average.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return v
}

// sessionMetric is Volcano's histogram of whole scheduling cycles (open, actions,
// close), in milliseconds.
const sessionMetric = "volcano_e2e_scheduling_latency_milliseconds"

// Histogram is a Prometheus histogram's cumulative bucket counts by upper bound, with
// its sum and count.
type Histogram struct {
	Buckets map[float64]float64
	Sum     float64
	Count   float64
}

// ScrapeHistogram reads one histogram from a metrics endpoint.
func ScrapeHistogram(url, name string) (Histogram, error) {
	resp, err := http.Get(url)
	if err != nil {
		return Histogram{}, err
	}
	defer resp.Body.Close()
	return ParseHistogram(resp.Body, name)
}

// ParseHistogram reads one histogram out of Prometheus text exposition.
func ParseHistogram(r io.Reader, name string) (Histogram, error) {
	h := Histogram{Buckets: map[float64]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return h, fmt.Errorf("%s: value in %q", name, line)
		}
		key := line[:sp]
		switch {
		case strings.HasPrefix(key, name+"_bucket{"):
			i := strings.Index(key, `le="`)
			if i < 0 {
				return h, fmt.Errorf("%s: no le in %q", name, line)
			}
			le := key[i+4:]
			le = le[:strings.IndexByte(le, '"')]
			b, err := strconv.ParseFloat(le, 64)
			if le == "+Inf" {
				b, err = math.Inf(1), nil
			}
			if err != nil {
				return h, fmt.Errorf("%s: le %q", name, le)
			}
			h.Buckets[b] = v
		case key == name+"_sum":
			h.Sum = v
		case key == name+"_count":
			h.Count = v
		}
	}
	return h, sc.Err()
}

// Since is the observations between an earlier scrape and this one.
func (h Histogram) Since(before Histogram) Histogram {
	out := Histogram{Buckets: map[float64]float64{}, Sum: h.Sum - before.Sum, Count: h.Count - before.Count}
	for b, v := range h.Buckets {
		out.Buckets[b] = v - before.Buckets[b]
	}
	return out
}

// Quantile estimates the q-quantile by linear interpolation inside its bucket (as
// Prometheus's histogram_quantile does); the top finite bound when it falls in +Inf.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 {
		return 0
	}
	bounds := make([]float64, 0, len(h.Buckets))
	for b := range h.Buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		n := h.Buckets[b]
		if n >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			if n == below {
				return b
			}
			return lower + (b-lower)*(rank-below)/(n-below)
		}
		lower, below = b, n
	}
	return lower
}
