module github.com/tessera-gpu/tessera/bench/topology

go 1.24.0

require (
	github.com/NVIDIA/go-gpuallocator v0.6.0
	github.com/tessera-gpu/tessera v0.0.0
)

require (
	github.com/NVIDIA/go-nvlib v0.7.3 // indirect
	github.com/NVIDIA/go-nvml v0.13.0-1 // indirect
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	k8s.io/api v0.34.2 // indirect
	k8s.io/apimachinery v0.34.2 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/utils v0.0.0-20250604170112-4c0f3b243397 // indirect
	sigs.k8s.io/json v0.0.0-20241014173422-cfa47c3a1cc8 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.3.0 // indirect
)

replace github.com/tessera-gpu/tessera => ../..

// go-gpuallocator's go-nvlib v0.7.3 does not build against the go-nvml the product
// requires; the engine imports no NVML, so pinning the older one here is safe.
replace github.com/NVIDIA/go-nvml => github.com/NVIDIA/go-nvml v0.12.9-0
