package meter

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseAndRewritePerAPI(t *testing.T) {
	for _, tc := range []struct {
		api      API
		body     string
		maxOut   int64
		field    string
		wantErr  bool
		wantOpts bool
	}{
		{OpenAIChat, `{"model":"m","stream":true,"max_tokens":500,"messages":[]}`, 500, "max_tokens", false, true},
		{OpenAIChat, `{"model":"m","max_completion_tokens":100,"max_tokens":900}`, 100, "max_completion_tokens", false, false},
		{OpenAIChat, `{"model":"m"}`, 0, "max_completion_tokens", false, false},
		{OpenAIResponses, `{"model":"m","input":"hi","max_output_tokens":64,"stream":true}`, 64, "max_output_tokens", false, false},
		{Anthropic, `{"model":"claude","max_tokens":1024,"messages":[]}`, 1024, "max_tokens", false, false},
		{Anthropic, `{"model":"claude","messages":[]}`, 0, "", true, false},
		{OpenAIChat, `{"model":""}`, 0, "", true, false},
		{OpenAIChat, `{"model":"m","max_tokens":-1}`, 0, "", true, false},
		{OpenAIChat, `{"model":"m","max_tokens":1.5}`, 0, "", true, false},
		{OpenAIChat, `{"model":"m"} {}`, 0, "", true, false},
		{OpenAIChat, `[1]`, 0, "", true, false},
	} {
		r, err := ParseRequest(tc.api, []byte(tc.body))
		if tc.wantErr {
			if !errors.Is(err, ErrRequest) {
				t.Errorf("%s: err = %v, want ErrRequest", tc.body, err)
			}
			continue
		}
		if err != nil || r.MaxOut != tc.maxOut {
			t.Fatalf("%s: %+v %v", tc.body, r, err)
		}
		out, err := r.Rewrite(7)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(out, &m)
		if m[tc.field] != float64(7) {
			t.Errorf("%s: rewritten %s = %v in %s", tc.body, tc.field, m[tc.field], out)
		}
		n := 0
		for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
			if _, ok := m[k]; ok {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d output limits after rewrite: %s", tc.body, n, out)
		}
		if _, ok := m["stream_options"]; ok != tc.wantOpts {
			t.Errorf("%s: stream_options present=%v", tc.body, ok)
		}
	}
}

func events(t *testing.T, stream string) *Tally {
	t.Helper()
	var tl Tally
	er := NewEventReader(strings.NewReader(stream), 1<<16)
	for {
		ev, err := er.Next()
		if err == io.EOF {
			return &tl
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tl.Event(ev); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUsageFromEachWireFormat(t *testing.T) {
	anthropic := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	tl := events(t, anthropic)
	if tl.In != 25 || tl.Out != 15 || tl.Deltas != 1 {
		t.Errorf("anthropic: %+v", tl)
	}
	responses := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi there\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":11,\"output_tokens\":3}}}\n\n"
	tl = events(t, responses)
	if tl.In != 11 || tl.Out != 3 || tl.Deltas != 1 || tl.DeltaLen != 8 {
		t.Errorf("responses: %+v", tl)
	}
	chat := "data: {\"choices\":[{\"delta\":{\"content\":\"abcdefghij\"}}]}\r\n\r\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}\n\ndata: [DONE]"
	tl = events(t, chat)
	if tl.In != 9 || tl.Out != 4 || tl.OutSoFar() != 4 {
		t.Errorf("chat: %+v", tl)
	}
	// Before any usage, relayed text counts: 10 bytes is at least 3 tokens.
	tl = events(t, "data: {\"choices\":[{\"delta\":{\"content\":\"abcdefghij\"}}]}\n\n")
	if tl.OutSoFar() != 3 || tl.HaveOut {
		t.Errorf("running count: %+v", tl)
	}
	var body Tally
	if err := body.Body([]byte(`{"usage":{"prompt_tokens":-1}}`)); !errors.Is(err, ErrUsage) {
		t.Errorf("negative usage accepted: %v", err)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(uint8(0), []byte(`{"model":"m","stream":true,"max_tokens":5,"stream_options":{"x":1}}`))
	f.Add(uint8(1), []byte(`{"model":"m","max_output_tokens":64}`))
	f.Add(uint8(2), []byte(`{"model":"c","max_tokens":1024}`))
	apis := []API{OpenAIChat, OpenAIResponses, Anthropic}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		api := apis[int(which)%3]
		r, err := ParseRequest(api, body)
		if err != nil {
			if !errors.Is(err, ErrRequest) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if r.MaxOut < 0 || r.Model == "" {
			t.Fatalf("parsed %+v", r)
		}
		out, err := r.Rewrite(3)
		if err != nil {
			if !errors.Is(err, ErrRequest) {
				t.Fatalf("untyped rewrite error %v", err)
			}
			return
		}
		// What the proxy sends upstream must parse back with the cap.
		r2, err := ParseRequest(api, out)
		if err != nil || r2.MaxOut != 3 || r2.Model != r.Model || r2.Stream != r.Stream {
			t.Fatalf("rewrite %s -> %s parsed back as %+v, %v", body, out, r2, err)
		}
	})
}

func FuzzSSEUsage(f *testing.F) {
	f.Add([]byte("event: message_delta\ndata: {\"usage\":{\"output_tokens\":15}}\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\n\r\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"response\":{\"usage\":{\"input_tokens\":1}}}\ndata: more\n\n:comment\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var tl Tally
		er := NewEventReader(strings.NewReader(string(stream)), 4096)
		var relayed int
		for {
			ev, err := er.Next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrEventTooLarge) {
					t.Fatalf("untyped error %v", err)
				}
				break
			}
			relayed += len(ev.Raw)
			if err := tl.Event(ev); err != nil && !errors.Is(err, ErrUsage) {
				t.Fatalf("untyped error %v", err)
			}
			if tl.In < 0 || tl.Out < 0 || tl.OutSoFar() < 0 {
				t.Fatalf("negative tally %+v", tl)
			}
		}
		if relayed > len(stream) {
			t.Fatalf("relayed %d bytes of a %d-byte stream", relayed, len(stream))
		}
	})
}
