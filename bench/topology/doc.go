// Package topology is a benchmark-only module: it runs Tessera's topology engine
// and NVIDIA's go-gpuallocator best-effort policy side by side on the same
// machines. It lives apart from the product module because go-gpuallocator v0.6.0
// requires older go-nvml and go-nvlib versions than the product builds with.
package topology
