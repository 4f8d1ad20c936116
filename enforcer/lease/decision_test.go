package lease

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// TestDecisionLeasesAreTheHeldOnes: the leases a grant's Decision makes
// when read are the leases the store holds (as List has them), one per
// claim in the request's order, from the table and the host store alike;
// and the Decision's JSON carries them and reads back.
func TestDecisionLeasesAreTheHeldOnes(t *testing.T) {
	ctx := context.Background()
	for _, s := range []Store{NewTable(), openHost(t, t.TempDir()+"/leases")} {
		h := Holder{Tenant: "uid:0", Agent: "a", Session: "s"}
		r := Request{Holder: h, Claims: []Claim{claim(t, "MUTATES FILE:/srv/x/**"), claim(t, "CONSUMES NET:api.example.com:443/tcp"),
			claim(t, "PROVIDES FILE:/srv/y.go")}}
		d, err := s.Acquire(ctx, r)
		if err != nil || d.Outcome != Granted || d.NumLeases() != 3 {
			t.Fatalf("%T: %v %v %d", s, d.Outcome, err, d.NumLeases())
		}
		held, err := s.List(ctx, Filter{Session: "s"})
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]Lease{}
		for _, l := range held {
			byID[l.ID] = l
		}
		got := d.Leases()
		for i, l := range got {
			if l.ID != d.LeaseID(i) || !reflect.DeepEqual(l, d.Lease(i)) || l.Resource != r.Claims[i].Resource {
				t.Errorf("%T: lease %d: %+v, LeaseID %s, claim %v", s, i, l, d.LeaseID(i), r.Claims[i])
			}
			if w, ok := byID[l.ID]; !ok || !reflect.DeepEqual(jsonOf(l), jsonOf(w)) {
				t.Errorf("%T: lease %d:\n got %s\nheld %s", s, i, jsonOf(l), jsonOf(w))
			}
		}
		var back Decision
		if err := json.Unmarshal([]byte(jsonOf(d)), &back); err != nil {
			t.Fatal(err)
		}
		if jsonOf(back) != jsonOf(d) || back.NumLeases() != 3 || back.LeaseID(2) != d.LeaseID(2) {
			t.Errorf("%T: read back %s\nwrote %s", s, jsonOf(back), jsonOf(d))
		}
	}
}

// jsonOf is v's JSON; a value that does not marshal fails the test (it
// panics).
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
