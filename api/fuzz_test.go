package api

import (
	"errors"
	"reflect"
	"testing"
)

// Every decoder must either fail with ErrInvalid/ErrUnsupportedVersion or return a
// value that re-encodes and decodes to itself: nothing is silently truncated.

func FuzzDecodeInventory(f *testing.F) {
	s, _ := EncodeInventory(sampleInventory())
	f.Add(s)
	f.Add(`{"version":"v1","cards":[]}`)
	f.Add(`{"version":"v2"}`)
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := DecodeInventory(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeInventory(inv)
		if err != nil {
			t.Fatalf("decoded inventory does not re-encode: %v", err)
		}
		again, err := DecodeInventory(enc)
		if err != nil || !reflect.DeepEqual(inv, again) {
			t.Fatalf("round trip differs: %v", err)
		}
	})
}

func FuzzDecodeContextReserve(f *testing.F) {
	s, _ := EncodeContextReserve(sampleContextReserve())
	f.Add(s)
	f.Add(`{"version":"v1","cards":{}}`)
	f.Add(`{"version":"v1","cards":{"MIG-1":4096,"GPU-2":0,"GPU-3":4097}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":5e2}}`)
	f.Add(`{"version":"v2"}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeContextReserve(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeContextReserve(r)
		if err != nil {
			t.Fatalf("decoded reserves do not re-encode: %v", err)
		}
		again, err := DecodeContextReserve(enc)
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("round trip differs: %v\n%+v\n%+v", err, r, again)
		}
	})
}

func FuzzDecodeCordons(f *testing.F) {
	s, _ := EncodeCordons(sampleCordons())
	f.Add(s)
	f.Add(`{"version":"v1","cards":{}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":{"reason":"fan","since":"2026-03-01T13:00:00.5+01:00"}}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":{"reason":"a\u0000b","since":"0000-01-01T00:00:00Z"}}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":{"since":"9999-12-31T23:59:59-23:59"}}}`)
	f.Add(`{"version":"v2"}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCordons(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeCordons(c)
		if err != nil {
			t.Fatalf("decoded cordons do not re-encode: %v", err)
		}
		again, err := DecodeCordons(enc)
		if err != nil || !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip differs: %v\n%+v\n%+v", err, c, again)
		}
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	s, _ := EncodeAssignment(sampleAssignment())
	f.Add(s)
	f.Add(`{"version":"v1","node":"n","qos":"best-effort","containers":[]}`)
	f.Add(`{"version":"v1","node":"n","qos":"burstable","containers":[{"name":"c","cards":[{"uuid":"GPU-a","memoryMiB":9856,"cores":100,"mig":"MIG-b"}]}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := DecodeAssignment(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeAssignment(a)
		if err != nil {
			t.Fatalf("decoded assignment does not re-encode: %v", err)
		}
		again, err := DecodeAssignment(enc)
		if err != nil || !reflect.DeepEqual(a, again) {
			t.Fatalf("round trip differs: %v", err)
		}
	})
}

func FuzzDecodeVolcanoNodeRegister(f *testing.F) {
	f.Add("GPU-1,10,40960,NVIDIA-A100,true:GPU-2,4,16384,NVIDIA-T4,false,hami-core:")
	f.Add("GPU-1,1,1,T,true")
	f.Fuzz(func(t *testing.T, s string) {
		cards, err := DecodeVolcanoNodeRegister(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		enc, err := EncodeVolcanoNodeRegister(cards)
		if err != nil {
			// The reader accepts ':' inside a type only as a separator, so a
			// decoded value always re-encodes.
			t.Fatalf("decoded cards do not re-encode: %v", err)
		}
		again, err := DecodeVolcanoNodeRegister(enc)
		if err != nil || !reflect.DeepEqual(cards, again) {
			t.Fatalf("round trip differs: %v\n%+v\n%+v", err, cards, again)
		}
	})
}

func FuzzDecodeVolcanoPodDevices(f *testing.F) {
	f.Add("GPU-a,NVIDIA,4096,30:GPU-b,NVIDIA,4096,30:;GPU-a,NVIDIA,1024,0:")
	f.Add(";")
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := DecodeVolcanoPodDevices(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		a := &PodAssignment{}
		for _, c := range cs {
			a.Containers = append(a.Containers, ContainerAssignment{Cards: c})
		}
		again, err := DecodeVolcanoPodDevices(EncodeVolcanoPodDevices(a))
		if err != nil || !reflect.DeepEqual(cs, again) {
			t.Fatalf("round trip differs: %v\n%+v\n%+v", err, cs, again)
		}
	})
}

func FuzzDecodeMIGInstances(f *testing.F) {
	s, _ := EncodeMIGInstances(sampleMIGInstances())
	f.Add(s)
	f.Add(`{"version":"v1","cards":{}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":null}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":[{"uuid":"MIG-1","profile":"7g.80gb","gi":0,"ci":0,"start":0,"size":8,"memoryMiB":81152}]}}`)
	f.Add(`{"version":"v1","cards":{"GPU-1":[{"uuid":"MIG-1","profile":"1g.5gb","gi":1,"ci":0,"start":63,"size":1,"memoryMiB":1e3}]}}`)
	f.Add(`{"version":"v2"}`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := DecodeMIGInstances(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error does not wrap a sentinel: %v", err)
			}
			return
		}
		enc, err := EncodeMIGInstances(m)
		if err != nil {
			t.Fatalf("decoded MIG instances do not re-encode: %v", err)
		}
		again, err := DecodeMIGInstances(enc)
		if err != nil || !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip differs: %v\n%+v\n%+v", err, m, again)
		}
	})
}
