package dra

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testUID = "3f0c1e9a-0000-4000-8000-000000000001"

func sampleCheckpoint() *Checkpoint {
	s := Share{Request: "gpu", Pool: "node-a", Device: "card-1", UUID: "GPU-bbbb", Index: 1, MemoryMiB: 4096, Cores: 30}
	return &Checkpoint{Version: CheckpointVersion, Claims: map[string]PreparedClaim{
		testUID: {Namespace: "team-a", Name: "train-0-gpu", Devices: []PreparedDevice{
			{Share: s, CDIDeviceIDs: CDIDeviceIDs(testUID, s, "nvidia.com/gpu")}}},
	}}
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := sampleCheckpoint()
	b, err := EncodeCheckpoint(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCheckpoint(b)
	if err != nil {
		t.Fatalf("DecodeCheckpoint(%s): %v", b, err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip\n %+v\nwant\n %+v", got, c)
	}
	empty, err := DecodeCheckpoint([]byte(`{"version":"v1","claims":{}}`))
	if err != nil || len(empty.Claims) != 0 {
		t.Errorf("empty checkpoint: %v, %+v", err, empty)
	}
}

func TestDecodeCheckpointRefuses(t *testing.T) {
	good, _ := EncodeCheckpoint(sampleCheckpoint())
	edit := func(old, new string) string {
		if !strings.Contains(string(good), old) {
			t.Fatalf("sample checkpoint has no %q", old)
		}
		return strings.Replace(string(good), old, new, 1)
	}
	tests := []struct{ name, in, want string }{
		{"not JSON", "{", "unexpected end"},
		{"a later version", `{"version":"v2","claims":{}}`, `version "v2"`},
		{"no version", `{"claims":{}}`, "version missing"},
		{"a version that is not a string", `{"version":1,"claims":{}}`, "version 1"},
		{"an unknown field", edit(`"cores": 30`, `"cores": 30, "priority": 1`), `unknown field "priority"`},
		{"a second JSON value", string(good) + "{}", "after top-level value"},
		{"a claim UID with a slash", edit(testUID, "../../etc"), `uid "../../etc"`},
		{"a device name this driver does not write", edit(`"device": "card-1"`, `"device": "gpu-1"`), `devices[0].device: "gpu-1"`},
		{"an index that disagrees with the device", edit(`"index": 1`, `"index": 2`), "devices[0].index: 2"},
		{"zero memory", edit(`"memoryMiB": 4096`, `"memoryMiB": 0`), "devices[0].memoryMiB: 0"},
		{"cores above 100", edit(`"cores": 30`, `"cores": 101`), "devices[0].cores: 101"},
		{"a CDI device ID that is not vendor/class=name", edit(`"nvidia.com/gpu=GPU-bbbb"`, `"GPU-bbbb"`), "devices[0].cdiDeviceIDs[0]"},
		{"a claim without a name", edit(`"name": "train-0-gpu"`, `"name": ""`), "name: missing"},
		{"too large a file", `{"version":"v1","claims":{}}` + strings.Repeat(" ", maxCheckpointBytes), "bytes (at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCheckpoint([]byte(tt.in))
			if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrCheckpoint mentioning %q", err, tt.want)
			}
		})
	}
}

func TestCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, CheckpointFile)
	c, err := readCheckpoint(path)
	if err != nil || len(c.Claims) != 0 || c.Version != CheckpointVersion {
		t.Fatalf("a missing checkpoint reads as %+v, %v; want an empty one", c, err)
	}
	if err := writeCheckpoint(path, sampleCheckpoint()); err != nil {
		t.Fatal(err)
	}
	got, err := readCheckpoint(path)
	if err != nil || !reflect.DeepEqual(got, sampleCheckpoint()) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	// Nothing but the checkpoint is left in the directory: the temporary file was renamed.
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the checkpoint alone", len(entries))
	}
	bad := sampleCheckpoint()
	bad.Claims[testUID].Devices[0].Cores = -1
	if err := writeCheckpoint(path, bad); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("writing an invalid checkpoint: %v, want ErrCheckpoint", err)
	}
	if got, _ := readCheckpoint(path); !reflect.DeepEqual(got, sampleCheckpoint()) {
		t.Errorf("a refused write changed the file")
	}
	if err := os.WriteFile(path, []byte(`{"version":"v1","claims":{"x":{}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCheckpoint(path); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), path) {
		t.Errorf("a corrupt checkpoint reads with %v, want ErrCheckpoint naming the file", err)
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	good, _ := EncodeCheckpoint(sampleCheckpoint())
	f.Add(good)
	f.Add([]byte(`{"version":"v1","claims":{}}`))
	f.Add([]byte(`{"version":"v1","claims":{"a-1":{"namespace":"n","name":"c","devices":[]}}}`))
	f.Add([]byte(`{"version":"v1","claims":null}`))
	f.Add([]byte(`{"version":"v1","claims":{"a-1":{"namespace":"n","name":"c","devices":[],"region":"volume"}}}`))
	f.Add([]byte(`{"version":"v0"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCheckpoint(b)
		if err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error %v does not wrap ErrCheckpoint", err)
			}
			return
		}
		// What decodes encodes, and decodes again to the same checkpoint.
		out, err := EncodeCheckpoint(c)
		if err != nil {
			t.Fatalf("decoded checkpoint does not encode: %v", err)
		}
		again, err := DecodeCheckpoint(out)
		if err != nil {
			t.Fatalf("re-encoded checkpoint does not decode: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip changed the checkpoint:\n%+v\n%+v", c, again)
		}
	})
}
