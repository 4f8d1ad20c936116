package main

import (
	"testing"
	"time"
)

func mustTime(t *testing.T) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, "2026-11-25T18:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
