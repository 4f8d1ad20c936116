package check

import (
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/celexpr"
)

// The guard runs the tools' autonomy conditions (unsupervised_if): every
// binary or test that builds a Pipeline can compile them.
func init() { policy.UseConditions(celexpr.Compiler{}) }
