package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// sysNodes is where the kernel lists NUMA nodes; cadvisor reads the kubelet's machine
// topology from it (node<i>/cpu<j> links, node<i>/meminfo, node<i>/distance).
const sysNodes = "/sys/devices/system/node"

var memTotal = regexp.MustCompile(`MemTotal:\s*([0-9]+) kB`)

// fakeNUMA builds, in dir, a node directory of n NUMA nodes that deal the host's CPUs out
// round-robin (node i links cpu<j> for j mod n == i, to the host's own CPU directory) and
// share its memory evenly, with distance 10 to themselves and 20 to the others, and
// bind-mounts it over /sys/devices/system/node in this (private) mount namespace.
func fakeNUMA(dir string, n int) error {
	if dir == "" {
		return errors.New("--numa-nodes needs --numa-dir")
	}
	cpus, err := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*")
	if err != nil {
		return err
	}
	sort.Slice(cpus, func(a, b int) bool { return cpuNumber(cpus[a]) < cpuNumber(cpus[b]) })
	if len(cpus) < n {
		return fmt.Errorf("%d NUMA nodes wanted, the host has %d CPUs", n, len(cpus))
	}
	mem, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return err
	}
	m := memTotal.FindSubmatch(mem)
	if m == nil {
		return errors.New("no MemTotal in /proc/meminfo")
	}
	total, _ := strconv.ParseUint(string(m[1]), 10, 64)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		node := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(node, 0o755); err != nil {
			return err
		}
		var list []string
		for j, cpu := range cpus {
			if j%n == i {
				if err := os.Symlink(cpu, filepath.Join(node, filepath.Base(cpu))); err != nil {
					return err
				}
				list = append(list, strconv.Itoa(cpuNumber(cpu)))
			}
		}
		dist := make([]string, n)
		for k := range dist {
			dist[k] = map[bool]string{true: "10", false: "20"}[k == i]
		}
		files := map[string]string{
			"meminfo":  fmt.Sprintf("Node %d MemTotal:       %d kB\n", i, total/uint64(n)),
			"distance": strings.Join(dist, " ") + "\n",
			"cpulist":  strings.Join(list, ",") + "\n",
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(node, name), []byte(body), 0o644); err != nil {
				return err
			}
		}
	}
	var online []string
	for i := 0; i < n; i++ {
		online = append(online, strconv.Itoa(i))
	}
	for _, f := range []string{"online", "possible", "has_cpu", "has_memory", "has_normal_memory"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(strings.Join(online, ",")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return bind(dir, sysNodes)
}

func cpuNumber(path string) int {
	k, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(path), "cpu"))
	return k
}
