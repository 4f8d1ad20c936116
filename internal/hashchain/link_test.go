package hashchain

import (
	"encoding/json"
	"testing"
)

var linkSeeds = []string{
	`{"seq":1,"prev":""}`,
	`{"prev":"ab","seq":18446744073709551615}`,
	`{"seq":18446744073709551616,"prev":"x"}`,
	`{"a":{"seq":2,"prev":"inner"},"b":[{"seq":3}],"prev":"p","seq":4}`,
	` { "seq" : 5 , "prev" : "q" } `,
	`{"seq":1,"seq":2,"prev":"a","prev":"b"}`,
	`{"seq":1,"seq":null,"prev":"a"}`,
	`{"SEQ":1,"Prev":"a"}`,
	`{"\u0073eq":1,"prev":"a"}`,
	`{"ſeq":1,"prev":"a"}`,
	`{"seq":1.0,"prev":"a"}`,
	`{"seq":-1,"prev":"a"}`,
	`{"seq":1e3,"prev":"a"}`,
	`{"seq":"1","prev":"a"}`,
	`{"seq":1,"prev":"a\"b"}`,
	`{"seq":1,"prev":1}`,
	`{"seq":1,"prev":"a\\"}`,
	`{"x":"}\"{[","seq":1,"prev":"a"}`,
	`[1]`, `null`, `"s"`, `{}`, `{"seq":1`, `{"seq":1,"prev":"a"} x`, ``,
	`{"seq":true,"prev":null}`,
}

// readLink must answer exactly what json.Unmarshal into a link answers:
// the same seq and prev, and an error exactly when it errs.
func checkReadLink(t *testing.T, line []byte) {
	seq, prev, err := readLink(line)
	var l link
	want := json.Unmarshal(line, &l)
	if (err == nil) != (want == nil) {
		t.Fatalf("%q: error %v, encoding/json %v", line, err, want)
	}
	if err != nil {
		return
	}
	if (seq == nil) != (l.Seq == nil) || seq != nil && *seq != *l.Seq {
		t.Fatalf("%q: seq %v, encoding/json %v", line, deref(seq), deref(l.Seq))
	}
	if (prev == nil) != (l.Prev == nil) || prev != nil && *prev != *l.Prev {
		t.Fatalf("%q: prev %v, encoding/json %v", line, deref(prev), deref(l.Prev))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestReadLinkMatchesEncodingJSON(t *testing.T) {
	for _, s := range linkSeeds {
		checkReadLink(t, []byte(s))
	}
	// The fast path is taken for ordinary lines (else it saves nothing).
	if _, _, ok := fastLink([]byte(`{"a":{"seq":9},"prev":"p","seq":4,"z":[1,"]"]}`)); !ok {
		t.Fatal("an ordinary line took the slow path")
	}
}

func FuzzReadLink(f *testing.F) {
	for _, s := range linkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkReadLink)
}
