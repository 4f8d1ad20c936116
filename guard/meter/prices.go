package meter

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"os"

	"github.com/klocklabs/klock/policy/money"
	"go.yaml.in/yaml/v3"
)

// ErrUnpriced is returned for a model the price table does not list.
var ErrUnpriced = errors.New("model not in the price table")

// Price is one model's price in micro-units (10^-6 of the currency's major
// unit) per token: 2500000 micro-USD per 1M tokens is input: 2.
type Price struct {
	Input  uint64 `yaml:"input"`
	Output uint64 `yaml:"output"`
}

// Prices is the configured table. "*" prices any model not listed.
type Prices struct {
	Currency string           `yaml:"currency"`
	Models   map[string]Price `yaml:"models"`
}

// LoadPrices reads a YAML price table:
//
//	currency: USD
//	models:
//	  gpt-4o-mini: {input: 1, output: 1}   # micro-USD per token
func LoadPrices(path string) (*Prices, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Prices
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("price table %s: %w (want currency: USD and models: {NAME: {input: N, output: N}} in integer micro-units per token)", path, err)
	}
	if _, err := money.Exponent(p.Currency); err != nil {
		return nil, fmt.Errorf("price table %s: %w", path, err)
	}
	if len(p.Models) == 0 {
		return nil, fmt.Errorf("price table %s lists no models", path)
	}
	return &p, nil
}

func (p *Prices) lookup(model string) (Price, error) {
	if pr, ok := p.Models[model]; ok {
		return pr, nil
	}
	if pr, ok := p.Models["*"]; ok {
		return pr, nil
	}
	return Price{}, fmt.Errorf("%w: %q (add it to the price table, or a \"*\" entry)", ErrUnpriced, model)
}

// Cost prices a call, rounded up to the currency's minor unit.
func (p *Prices) Cost(pr Price, in, out int64) (money.Amount, error) {
	m := new(big.Int).Mul(big.NewInt(max(in, 0)), new(big.Int).SetUint64(pr.Input))
	m.Add(m, new(big.Int).Mul(big.NewInt(max(out, 0)), new(big.Int).SetUint64(pr.Output)))
	return money.FromMicros(m, p.Currency)
}

// affordable returns how many output tokens fit in limit after in input
// tokens (limit in minor units; the result is exact: Cost of it <= limit).
func (p *Prices) affordable(pr Price, in int64, limit uint64) int64 {
	if pr.Output == 0 {
		return 1 << 40
	}
	exp, _ := money.Exponent(p.Currency)
	// micro-units available = limit * 10^(6-exp) (or / 10^(exp-6)).
	micros := new(big.Int).SetUint64(limit)
	if exp <= 6 {
		micros.Mul(micros, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(6-exp)), nil))
	} else {
		micros.Quo(micros, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp-6)), nil))
	}
	micros.Sub(micros, new(big.Int).Mul(big.NewInt(max(in, 0)), new(big.Int).SetUint64(pr.Input)))
	if micros.Sign() <= 0 {
		return 0
	}
	n := micros.Quo(micros, new(big.Int).SetUint64(pr.Output))
	if !n.IsInt64() || n.Int64() > 1<<40 {
		return 1 << 40
	}
	return n.Int64()
}
