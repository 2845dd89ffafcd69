package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTheLoopbackPluginAnswersEveryCNICommand(t *testing.T) {
	for _, tc := range []struct {
		cmd, conf, want string
		rc              int
	}{
		{"ADD", `{"cniVersion":"1.0.0","name":"n","type":"tessera-loopback"}`, `"address":"127.0.0.1/8"`, 0},
		{"ADD", `{"cniVersion":"0.4.0"}`, `"cniVersion":"0.4.0"`, 0},
		{"DEL", `{"cniVersion":"1.0.0"}`, "", 0},
		{"CHECK", `{"cniVersion":"1.0.0"}`, "", 0},
		{"VERSION", ``, `"supportedVersions"`, 0},
		{"FROB", `{"cniVersion":"1.0.0"}`, `"code":4`, 1},
	} {
		var out bytes.Buffer
		if rc := loopbackCNI(tc.cmd, strings.NewReader(tc.conf), &out); rc != tc.rc {
			t.Errorf("%s: exit %d, want %d", tc.cmd, rc, tc.rc)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: answered %q, want it to hold %q", tc.cmd, out.String(), tc.want)
		}
		if out.Len() > 0 && !json.Valid(out.Bytes()) {
			t.Errorf("%s: not JSON: %q", tc.cmd, out.String())
		}
	}
}
