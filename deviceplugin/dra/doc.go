// Package dra is the node agent's Dynamic Resource Allocation driver, vgpu.tessera.io:
// the agent's cards published as consumable devices (Kubernetes 1.34's resource.k8s.io/v1
// with consumable capacity) and the kubelet plugin that prepares the claims the scheduler
// allocated on them.
//
//   - model.go, links.go, taints.go: the node's ResourceSlice as pure functions of the
//     card inventory, the unhealthy reasons and the cordons.
//   - allocation.go: a claim's allocation results read as hostile input and turned into
//     per-card shares (memory MiB, cores percent).
//   - checkpoint.go: the versioned record of prepared claims that survives a restart.
//   - cdispec.go: the per-claim CDI spec (limits file, hook library, environment).
//   - prepare.go: the kubeletplugin.DRAPlugin implementation.
//   - region.go: where a claim's containers keep vgpu-core's region (the pods' region
//     volume or their /dev/shm), chosen once per claim.
//   - guardlimits.go, claimrecords.go: the prepared claims as the memory guard's per-pod
//     limits and as per-pod records for the usage metrics; the node's pod informer (nodepods), the pods they are
//     matched against.
//   - driver.go: the Driver, which owns the kubelet plugin helper and republishes the
//     ResourceSlice when health or cordons change.
//
// docs/dra.md describes what users write and what is not built yet.
package dra
