// Package deviceplugin is Tessera's node agent. Its sub-packages each do one job:
//
//   - discovery: reads the node's cards, NUMA nodes, MIG mode and links through NVML.
//   - cards: the agent's live view of its cards (health, slots) that every other part reads.
//   - health: NVML XID events and a periodic check that mark cards unhealthy and healthy again.
//   - kubeletserver: the v1beta1 device plugin gRPC server, registration and re-registration.
//   - handoff: routes the kubelet's calls: which pod and container a call serves and
//     what the container gets.
//   - nodepods: the node's pods in the API server: informer, assignments, handoff marks.
//   - podresources: the client of the kubelet's PodResources API.
//   - records: the per-container directories and Allocate's records on the host.
//   - hookenv: the environment, mounts and limits file vgpu-core reads.
//   - gc: finishes interrupted handoffs and removes gone pods' directories.
//   - inventory: publishes the node inventory and heartbeat annotations.
//   - metrics: the Prometheus collectors.
//   - config: the versioned configuration file, environment and flags, with their defaults.
//   - agent: wires the parts together for cmd/vgpu-device-plugin.
//
// The test doubles (a kubelet simulation, fake NVML machines) live in internal/testing;
// the agent never imports them.
//
// docs/device-plugin.md describes the handoff mechanism and the container contract.
package deviceplugin
