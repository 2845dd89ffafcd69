//go:build tools

// Package volcanoe2e pins the module that `make volcano-e2e` builds Volcano v1.14.1's
// own scheduling e2e suites from (volcano.sh/volcano/test/e2e/schedulingbase and
// schedulingaction, compiled with go test -c). It is a module of its own so that Ginkgo,
// Gomega and Kubernetes' e2e framework stay out of the product and e2e modules. The
// blank imports are what the suites' test files import beyond their own package, so
// that go.sum holds every module the test binaries need.
package volcanoe2e

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "k8s.io/kubernetes/test/e2e/framework"
	_ "k8s.io/kubernetes/test/e2e/framework/node"
	_ "k8s.io/kubernetes/test/e2e/framework/pod"
	_ "k8s.io/kubernetes/test/e2e/framework/pv"
	_ "k8s.io/kubernetes/test/e2e/framework/skipper"
	_ "k8s.io/kubernetes/test/e2e/storage/testsuites"
	_ "k8s.io/kubernetes/test/e2e/storage/utils"
	_ "k8s.io/kubernetes/test/utils/image"
	_ "k8s.io/pod-security-admission/api"
	_ "volcano.sh/volcano/test/e2e/util"
)
