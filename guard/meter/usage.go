package meter

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrUsage is returned for a usage report that cannot be read.
var ErrUsage = errors.New("unreadable usage")

// Tally accumulates what a response says about tokens: the usage the API
// reported (authoritative) and, while a stream runs, the output relayed so
// far (for cutting a stream before the API reports anything).
type Tally struct {
	In, Out          int64 // reported by the API
	HaveIn, HaveOut  bool
	Deltas, DeltaLen int64 // output events and their text bytes, as relayed
}

type usageWire struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
}

type holder struct {
	Usage *usageWire `json:"usage"`
}

type wire struct {
	Type     string     `json:"type"`
	Usage    *usageWire `json:"usage"`
	Response *holder    `json:"response"`
	Message  *holder    `json:"message"`
	Choices  []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Delta json.RawMessage `json:"delta"`
}

func (t *Tally) take(u *usageWire) error {
	if u == nil {
		return nil
	}
	set := func(v *int64, dst *int64, have *bool) error {
		if v == nil {
			return nil
		}
		if *v < 0 {
			return fmt.Errorf("%w: negative token count %d", ErrUsage, *v)
		}
		// Anthropic reports output cumulatively; never go backwards.
		if !*have || *v > *dst {
			*dst = *v
		}
		*have = true
		return nil
	}
	in, out := u.InputTokens, u.OutputTokens
	if u.PromptTokens != nil {
		in = u.PromptTokens
	}
	if u.CompletionTokens != nil {
		out = u.CompletionTokens
	}
	if err := set(in, &t.In, &t.HaveIn); err != nil {
		return err
	}
	return set(out, &t.Out, &t.HaveOut)
}

// Body reads the usage of a complete (non-streamed) JSON response.
func (t *Tally) Body(body []byte) error {
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return fmt.Errorf("%w: response is not JSON: %v", ErrUsage, err)
	}
	return t.take(w.Usage)
}

// Event reads one SSE event's data: usage wherever the API puts it, and
// the output text it carries.
func (t *Tally) Event(ev *Event) error {
	if ev.Final || len(ev.Data) == 0 {
		return nil
	}
	var w wire
	if err := json.Unmarshal(ev.Data, &w); err != nil {
		return fmt.Errorf("%w: event %q data is not JSON: %v", ErrUsage, ev.Name, err)
	}
	for _, u := range []*usageWire{w.Usage, usageOf(w.Response), usageOf(w.Message)} {
		if err := t.take(u); err != nil {
			return err
		}
	}
	for _, c := range w.Choices { // OpenAI chat
		if c.Delta.Content != "" {
			t.Deltas++
			t.DeltaLen += int64(len(c.Delta.Content))
		}
	}
	if len(w.Delta) > 0 {
		var s string
		var obj struct {
			Text string `json:"text"`
		}
		switch {
		case json.Unmarshal(w.Delta, &s) == nil && s != "": // OpenAI responses
			t.Deltas++
			t.DeltaLen += int64(len(s))
		case json.Unmarshal(w.Delta, &obj) == nil && obj.Text != "": // Anthropic
			t.Deltas++
			t.DeltaLen += int64(len(obj.Text))
		}
	}
	return nil
}

func usageOf(h *holder) *usageWire {
	if h == nil {
		return nil
	}
	return h.Usage
}

// OutSoFar is the output to hold a running stream to: the API's own count
// when it has given one, else the relayed output (one token per event at
// least, and at least one per four bytes of text).
func (t *Tally) OutSoFar() int64 {
	n := max(t.Deltas, (t.DeltaLen+3)/4)
	if t.HaveOut {
		n = max(n, t.Out)
	}
	return n
}
