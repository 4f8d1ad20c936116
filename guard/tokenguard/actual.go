package tokenguard

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/policy/money"
)

// Source is where an actual figure came from (seed 000).
type Source string

// Sources.
const (
	HarnessReported Source = "harness-reported"
	APIUsage        Source = "api-usage"
	ManualMeter     Source = "manual-meter"
	Unavailable     Source = "unavailable"
)

// Sentinel errors for actuals.
var (
	ErrNoProvenance = errors.New("actual without a declared source")
	ErrFabricated   = errors.New("an unavailable actual carries figures")
)

// Actual is a measured cost with its provenance.
type Actual struct {
	TokensIn, TokensOut, LatencyMS int64
	Cost                           *money.Amount
	Source                         Source
	// UnavailableReason is required when Source is Unavailable.
	UnavailableReason string
}

// Validate rejects an actual whose provenance is missing or unknown, an
// unavailable one without a reason, and an unavailable one that carries
// figures anyway (which would be a guess presented as a measurement).
func (a Actual) Validate() error {
	switch a.Source {
	case HarnessReported, APIUsage, ManualMeter:
		if a.TokensIn < 0 || a.TokensOut < 0 || a.LatencyMS < 0 {
			return fmt.Errorf("%w: negative figures in a %s actual", ErrNoProvenance, a.Source)
		}
		return nil
	case Unavailable:
		if a.UnavailableReason == "" {
			return fmt.Errorf("%w: source unavailable needs unavailable_reason", ErrNoProvenance)
		}
		if a.TokensIn != 0 || a.TokensOut != 0 || a.LatencyMS != 0 || a.Cost != nil {
			return fmt.Errorf("%w: record the figures with their real source, or none", ErrFabricated)
		}
		return nil
	case "":
		return fmt.Errorf("%w: set source to harness-reported, api-usage, manual-meter or unavailable", ErrNoProvenance)
	}
	return fmt.Errorf("%w: unknown source %q (want harness-reported, api-usage, manual-meter or unavailable)", ErrNoProvenance, a.Source)
}

// Exceeded lists the envelope maxima a (valid) actual went over.
func (g *Guard) Exceeded(a Actual) []string {
	if a.Source == Unavailable {
		return nil
	}
	over, _ := g.limits(a.TokensIn, a.TokensOut, a.LatencyMS, a.Cost)
	return over
}
