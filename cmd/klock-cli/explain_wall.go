package main

import (
	"sort"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/internal/explain"
	"github.com/klocklabs/klock/policy"
)

// explainWall plans the Landlock wall for rs on this host, as klock run
// would at this moment, and says which declared rules it enforces by
// detection and which it cannot grant. nil when the host has no Landlock
// or the plan fails (klock run says why).
func explainWall(rs *policy.Ruleset) *explain.Wall {
	abi, err := launch.ProbeABI()
	if err != nil {
		return nil
	}
	if fl, err := rs.FollowLinks(launch.TrustedLinks(rs.Workdir)); err == nil {
		rs = fl
	}
	plan, err := launch.PlanLandlock(rs, abi)
	if err != nil {
		return nil
	}
	w := &explain.Wall{ABI: abi}
	seen := map[string]bool{}
	for _, r := range plan.Residuals {
		if r.Object == "" || seen[string(r.Kind)+r.Object] || !declared(rs, r.Intents) {
			continue
		}
		seen[string(r.Kind)+r.Object] = true
		n := explain.WallNote{Object: r.Object, Wall: r.Wall, Reason: r.Reason}
		switch {
		case r.Kind == launch.Widened && r.Wall != "":
			w.Detected = append(w.Detected, n)
		case r.Kind == launch.Narrowed:
			w.Refused = append(w.Refused, n)
		}
	}
	sort.Slice(w.Detected, func(i, j int) bool { return w.Detected[i].Object < w.Detected[j].Object })
	return w
}

// declared reports whether one of the intents is the manifest's own (not
// the baseline's: its optional system files are no news to the operator).
func declared(rs *policy.Ruleset, intents []int) bool {
	for _, i := range intents {
		if i >= 0 && i < len(rs.Intents) && rs.Intents[i].Origin == "manifest" {
			return true
		}
	}
	return false
}
