// Command pause is two small programs of the real-runtime nodes in one static binary:
//
//   - the pause container of every pod sandbox (the image tessera.local/pause): it sleeps
//     until SIGTERM or SIGINT, as Kubernetes' pause does;
//   - run with CNI_COMMAND set (containerd's CRI executes it from the node's CNI bin dir as
//     plugin "tessera-loopback"), a CNI plugin that attaches nothing: the pod's network
//     namespace keeps only lo (containerd brings it up), and ADD reports 127.0.0.1/8 as
//     the pod's address, since containerd fails a sandbox whose CNI result has none
//     ("failed to find network info for sandbox"). DEL, CHECK, STATUS and GC succeed;
//     VERSION lists the spec versions it speaks.
//
// With no CNI configuration containerd reports NetworkReady false, and the kubelet keeps
// the node NotReady and starts no pod that is not on the host's network.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if cmd := os.Getenv("CNI_COMMAND"); cmd != "" {
		os.Exit(loopbackCNI(cmd, os.Stdin, os.Stdout))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// loopbackCNI answers one CNI call: the network configuration on in, the command in
// CNI_COMMAND, the result or an error object on out.
func loopbackCNI(cmd string, in io.Reader, out io.Writer) int {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	b, _ := io.ReadAll(in)
	_ = json.Unmarshal(b, &conf) // VERSION may come with an empty configuration
	if conf.CNIVersion == "" {
		conf.CNIVersion = "1.0.0"
	}
	enc := json.NewEncoder(out)
	var err error
	switch cmd {
	case "ADD":
		err = enc.Encode(map[string]any{"cniVersion": conf.CNIVersion,
			"ips": []map[string]string{{"address": "127.0.0.1/8"}}})
	case "DEL", "CHECK", "STATUS", "GC":
	case "VERSION":
		err = enc.Encode(map[string]any{"cniVersion": conf.CNIVersion,
			"supportedVersions": []string{"0.4.0", "1.0.0", "1.1.0"}})
	default:
		_ = enc.Encode(map[string]any{"cniVersion": conf.CNIVersion, "code": 4, "msg": "unknown CNI_COMMAND " + cmd})
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tessera-loopback:", err)
		return 1
	}
	return 0
}
