package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/guard/costreport"
)

// itemize applies a plugin's breakdown (seed 003's ToolInvocationCost
// breakdown) to its answer: the call is charged the breakdown's sum, and a
// cost that disagrees with it makes the answer unreadable (whatever the
// plugin meant, klock will not pick one of two prices).
func (r *Result) itemize(breakdown json.RawMessage) error {
	b := bytes.TrimSpace(breakdown)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	total, err := costreport.Total(r.Cost, b)
	if err != nil {
		return fmt.Errorf("breakdown: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return fmt.Errorf("breakdown: %w", err)
	}
	r.Cost, r.Breakdown = total, compact.Bytes()
	return nil
}
