package shebang

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		fields  []string
		script  bool
	}{
		{"#!/usr/bin/env node\nrequire('x')\n", []string{"/usr/bin/env", "node"}, true},
		{"#! /bin/sh -e -u\n", []string{"/bin/sh", "-e -u"}, true},
		{"#!/bin/sh", []string{"/bin/sh"}, true},
		{"#!\n", nil, true},
		{"\x7fELF\x02\x01", nil, false},
		{"", nil, false},
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(tc.content), 0o755); err != nil {
			t.Fatal(err)
		}
		fields, script, err := Read(p)
		if err != nil || script != tc.script || !slices.Equal(fields, tc.fields) {
			t.Errorf("%q: %q, %v, %v; want %q, %v", tc.content, fields, script, err, tc.fields, tc.script)
		}
	}
	if _, _, err := Read(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file read without an error")
	}
}
