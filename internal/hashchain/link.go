package hashchain

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Every append and every verified line has its seq and prev read back.
// encoding/json does that by reflection over the whole line, which for a
// receipt (about 1 KiB) cost some 11 us, a tenth of a budget decision's
// CPU. readLink finds the two members with a scan over a line json.Valid
// has already accepted, and hands anything unusual to encoding/json, so its
// answer is always encoding/json's (TestReadLinkMatchesEncodingJSON and
// FuzzReadLink compare them).

// readLink returns line's top-level "seq" and "prev" (nil when absent or
// null), exactly as json.Unmarshal into a link would.
func readLink(line []byte) (*uint64, *string, error) {
	if !json.Valid(line) {
		return slowLink(line)
	}
	seq, prev, ok := fastLink(line)
	if !ok {
		return slowLink(line)
	}
	return seq, prev, nil
}

func slowLink(line []byte) (*uint64, *string, error) {
	var l link
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, nil, err
	}
	return l.Seq, l.Prev, nil
}

// fastLink scans a valid JSON line. It gives up (ok false) on anything
// where encoding/json's rules take more than a scan to follow: a
// top-level value that is not an object, a member name with an escape or
// one that only case-folds to seq or prev (encoding/json matches names
// case-insensitively), a seq that is not plain digits, a prev that is not
// an escape-free, valid UTF-8 string.
func fastLink(line []byte) (seq *uint64, prev *string, ok bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return nil, nil, false
	}
	i++
	for {
		i = skipSpace(line, i)
		if line[i] == '}' {
			return seq, prev, true
		}
		if line[i] == ',' {
			i = skipSpace(line, i+1)
		}
		// A member name (valid JSON: a string).
		end, escaped := stringEnd(line, i)
		name := line[i+1 : end-1]
		i = skipSpace(line, end)
		i = skipSpace(line, i+1) // past ':'
		vEnd := valueEnd(line, i)
		val := line[i:vEnd]
		i = vEnd
		isSeq, isPrev := string(name) == "seq", string(name) == "prev"
		if escaped || (!isSeq && !isPrev && (bytes.EqualFold(name, []byte("seq")) || bytes.EqualFold(name, []byte("prev")))) {
			return nil, nil, false
		}
		switch {
		case isSeq:
			if string(val) == "null" {
				seq = nil // encoding/json sets a pointer to nil on null
				continue
			}
			for _, c := range val {
				if c < '0' || c > '9' {
					return nil, nil, false
				}
			}
			n, err := strconv.ParseUint(string(val), 10, 64)
			if err != nil {
				return nil, nil, false
			}
			seq = &n
		case isPrev:
			if string(val) == "null" {
				prev = nil
				continue
			}
			// encoding/json replaces invalid UTF-8 with U+FFFD.
			if val[0] != '"' || bytes.IndexByte(val, '\\') >= 0 || !utf8.Valid(val) {
				return nil, nil, false
			}
			p := string(val[1 : len(val)-1])
			prev = &p
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] (a
// quote) and whether it holds an escape.
func stringEnd(b []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return len(b), escaped
}

// valueEnd returns the index just past the value starting at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := stringEnd(b, j)
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}
