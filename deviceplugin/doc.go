// Package deviceplugin is Tessera's node agent. Its sub-packages each do one job:
//
//   - discovery: reads the node's cards, NUMA nodes, MIG mode and links through NVML.
//   - cards: the agent's live view of its cards (health, slots) that every other part reads.
//   - health: NVML XID events and a periodic check that mark cards unhealthy and healthy again.
//   - kubeletserver: the v1beta1 device plugin gRPC server, registration and re-registration.
//   - handoff: which pod and container a kubelet call serves, what the container gets, and
//     the per-container directories.
//   - inventory: publishes the node inventory and heartbeat annotations.
//   - metrics: the Prometheus collectors.
//   - config: the versioned configuration file, environment and flags.
//   - agent: wires the parts together for cmd/vgpu-device-plugin.
//   - kubeletsim: a kubelet simulation for the unit tests (the e2e harness runs the real
//     kubelet); the agent never imports it.
//
// docs/device-plugin.md describes the handoff mechanism and the container contract.
package deviceplugin
