package budget

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"time"

	"github.com/klocklabs/klock/policy/money"
	"go.yaml.in/yaml/v3"
)

// ErrRatesFile: a rates file is missing, malformed or states a rate
// without its evidence.
var ErrRatesFile = errors.New("invalid rates file")

// A rates file is the configured rate source (seed 003's oracle): every
// rate it states carries who stated it and when, and receipts record both
// with the file's hash, so a conversion can be checked after the fact.
//
//	rates:
//	  - {from: USDC, to: USD, rate: "0.9998", margin_bps: 50,
//	     source: "treasury desk quote 2026-11-25", at: "2026-11-25T12:00:00Z"}
//	  - {from: EUR, to: USD, numerator: 108, denominator: 100,
//	     source: "ECB reference rate", at: "2026-11-25T14:15:00Z"}
//
// rate is a decimal read from its text (never a float); numerator and
// denominator say the same as integers. One major unit of from is worth
// rate major units of to.
type ratesFile struct {
	Rates []rateLine `yaml:"rates"`
}

type rateLine struct {
	From        string `yaml:"from"`
	To          string `yaml:"to"`
	Rate        string `yaml:"rate"`
	Numerator   uint64 `yaml:"numerator"`
	Denominator uint64 `yaml:"denominator"`
	MarginBPS   uint32 `yaml:"margin_bps"`
	Source      string `yaml:"source"`
	At          string `yaml:"at"`
}

var decimalRe = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?$`)

// LoadRates reads a rates file. Every error names the file, the rate (by
// its position and pair) and what a correct line looks like.
func LoadRates(path string) (*RateTable, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRatesFile, err)
	}
	var f ratesFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v (want rates: [{from, to, rate, margin_bps, source, at}])", ErrRatesFile, path, err)
	}
	if len(f.Rates) == 0 {
		return nil, fmt.Errorf("%w: %s states no rates (want rates: [{from: USDC, to: USD, rate: \"1\", source: ..., at: 2026-11-25T12:00:00Z}])", ErrRatesFile, path)
	}
	out := make([]SourcedRate, 0, len(f.Rates))
	for i, l := range f.Rates {
		r, err := l.sourced()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: rates[%d] (%s->%s): %v", ErrRatesFile, path, i, l.From, l.To, err)
		}
		out = append(out, r)
	}
	t, err := NewSourcedRateTable(out...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRatesFile, path, err)
	}
	sum := sha256.Sum256(data)
	t.File, t.FileSHA256 = path, hex.EncodeToString(sum[:])
	return t, nil
}

func (l rateLine) sourced() (SourcedRate, error) {
	r := SourcedRate{Rate: money.Rate{From: l.From, To: l.To, MarginBPS: l.MarginBPS}, Source: l.Source}
	if l.Source == "" {
		return r, errors.New("source is required: say who stated the rate (an oracle, a desk, a published reference)")
	}
	at, err := time.Parse(time.RFC3339, l.At)
	if err != nil {
		return r, fmt.Errorf("at %q: want the time the rate was stated, RFC 3339 (2026-11-25T12:00:00Z)", l.At)
	}
	r.At = at.Unix()
	switch {
	case l.Rate != "" && (l.Numerator != 0 || l.Denominator != 0):
		return r, errors.New("give rate or numerator/denominator, not both")
	case l.Rate != "":
		m := decimalRe.FindStringSubmatch(l.Rate)
		if m == nil {
			return r, fmt.Errorf("rate %q: want a decimal such as \"0.9998\"", l.Rate)
		}
		num, ok := new(big.Int).SetString(m[1]+m[2], 10)
		den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(m[2]))), nil)
		if !ok || !num.IsUint64() || !den.IsUint64() {
			return r, fmt.Errorf("rate %q has too many digits", l.Rate)
		}
		r.Numerator, r.Denominator = num.Uint64(), den.Uint64()
	default:
		r.Numerator, r.Denominator = l.Numerator, l.Denominator
	}
	if r.Numerator == 0 || r.Denominator == 0 {
		return r, errors.New("the rate must be above zero: give rate, or numerator and denominator")
	}
	if _, err := r.Convert(money.Amount{Currency: r.From}); err != nil {
		return r, err
	}
	return r, nil
}
