package oci

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestDecodeSpec(t *testing.T) {
	runc, err := os.ReadFile("testdata/runc-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSpec(runc); err != nil {
		t.Fatalf("runc spec: %v", err)
	}
	for _, tc := range []struct {
		name, in string
		lost     []string
		bad      bool
	}{
		{name: "zero values are not lost", in: `{"ociVersion":"1.0.2","process":{"terminal":false,"args":["sh"],"user":{"uid":0,"gid":0},"cwd":"/","env":[]},"annotations":{},"hooks":{}}`},
		{name: "unknown top level", in: `{"ociVersion":"1.0.2","futureConfinement":{"on":true}}`, lost: []string{"futureConfinement"}},
		{name: "unknown nested", in: `{"ociVersion":"1.0.2","process":{"args":["sh"],"cwd":"/","user":{"uid":1,"gid":1},"newKnob":"x"},"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW","extra":1}}}`, lost: []string{"linux.seccomp.extra", "process.newKnob"}},
		{name: "unknown in a list", in: `{"ociVersion":"1.0.2","mounts":[{"destination":"/a","type":"tmpfs","source":"tmpfs"},{"destination":"/b","idmap":"x"}]}`, lost: []string{"mounts[1].idmap"}},
		{name: "not json", in: `{`, bad: true},
		{name: "wrong type", in: `{"process":{"args":"sh"}}`, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSpec([]byte(tc.in))
			switch {
			case tc.bad:
				if !errors.Is(err, ErrBadSpec) {
					t.Fatalf("err = %v; want ErrBadSpec", err)
				}
			case tc.lost == nil:
				if err != nil {
					t.Fatal(err)
				}
			default:
				if !errors.Is(err, ErrSpecFields) {
					t.Fatalf("err = %v; want ErrSpecFields", err)
				}
				for _, l := range tc.lost {
					if !strings.Contains(err.Error(), l) {
						t.Errorf("error does not name %s: %v", l, err)
					}
				}
			}
		})
	}
}
