package receipt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// maxExact is the largest integer canonical JSON (I-JSON, RFC 8785) carries
// exactly as a number.
const maxExact = 1 << 53

// Units is a u64 count of minor units. It is a JSON number up to 2^53 and a
// decimal string beyond, so canonicalization never rounds money.
type Units uint64

// MarshalJSON writes a number when exact, else a string.
func (u Units) MarshalJSON() ([]byte, error) {
	if u <= maxExact {
		return strconv.AppendUint(nil, uint64(u), 10), nil
	}
	return []byte(`"` + strconv.FormatUint(uint64(u), 10) + `"`), nil
}

// UnmarshalJSON reads either form; a string must hold a value beyond 2^53
// (anything else would have been written as a number, so it is not ours).
func (u *Units) UnmarshalJSON(b []byte) error {
	s, quoted := bytes.CutPrefix(b, []byte(`"`))
	if quoted {
		s = bytes.TrimSuffix(s, []byte(`"`))
	}
	if len(s) == 0 || (len(s) > 1 && s[0] == '0') {
		return fmt.Errorf("%w: units %s", ErrMalformed, b)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return fmt.Errorf("%w: units %s is not a non-negative integer", ErrMalformed, b)
		}
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: units %s: %v", ErrMalformed, b, err)
	}
	if quoted != (v > maxExact) {
		return fmt.Errorf("%w: units %s: numbers up to 2^53 are JSON numbers, larger ones strings", ErrMalformed, b)
	}
	*u = Units(v)
	return nil
}

var _ json.Marshaler = Units(0)
