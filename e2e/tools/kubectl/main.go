// Command kubectl is Kubernetes' own kubectl (k8s.io/kubectl v0.34.2), built for the
// end-to-end suite's walk through the docs, which runs the pages' commands as written. A
// module of its own, so that its dependencies touch neither the product nor the harness.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
