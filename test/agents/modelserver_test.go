//go:build linux

package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scripted model: an HTTP server that speaks the two model APIs the
// CLIs use, Anthropic's Messages API (POST /v1/messages, Claude Code) and
// OpenAI's Responses API (POST /v1/responses, Codex), streaming (SSE) and
// not, and answers every request of the agent loop with the next step of a
// script: a tool call of the CLI's own tools (write a file, run a shell
// command), then a final text answer. Which step a request is at is the
// number of tool results its conversation carries, so the server keeps no
// state between requests and side requests (a title, a quota probe: no
// tools offered) get a short text answer without moving the script on.
//
// Every request is logged (method, path, model, the tools offered, the
// step) to the server's log file and kept, so a test can assert what never
// reached the model (a secret the agent read).

// step is one turn of the scripted model.
type step struct {
	// write: the file (an absolute path) and its content; Claude Code
	// writes it with its Write tool, Codex with a shell command.
	writePath, writeContent string
	// shell: a shell command, run with the CLI's shell tool.
	shell string
	// text: the final answer (ends the task).
	text string
}

func writeStep(path, content string) step { return step{writePath: path, writeContent: content} }
func shellStep(cmd string) step           { return step{shell: cmd} }
func textStep(s string) step              { return step{text: s} }

// modelServer is the scripted model for one CLI.
type modelServer struct {
	t      testing.TB
	ln     net.Listener
	srv    *http.Server
	logf   *os.File
	mu     sync.Mutex
	script []step
	bodies [][]byte // every request body, in order
	calls  []string // one line per request
	// toolOutputs are the tool results the CLI sent back, in order.
	toolOutputs []string
}

func newModelServer(t testing.TB, logPath string) *modelServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	m := &modelServer{t: t, ln: ln, logf: f}
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serve), ReadHeaderTimeout: 10 * time.Second}
	go m.srv.Serve(ln)
	t.Cleanup(func() { m.srv.Close(); f.Close() })
	return m
}

// Port is the server's loopback port.
func (m *modelServer) Port() int { return m.ln.Addr().(*net.TCPAddr).Port }

// URL is the server's base URL.
func (m *modelServer) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.Port()) }

// setScript replaces the script (before a run) and forgets the previous
// run's tool outputs.
func (m *modelServer) setScript(s []step) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = s
	m.toolOutputs = nil
}

// received reports whether any request body the server got contains s.
func (m *modelServer) received(s string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.bodies {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
		// JSON escapes: a secret with a slash or a newline.
		if esc, _ := json.Marshal(s); bytes.Contains(b, esc[1:len(esc)-1]) {
			return true
		}
	}
	return false
}

func (m *modelServer) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.bodies)
}

func (m *modelServer) outputs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.toolOutputs...)
}

func (m *modelServer) log(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	m.mu.Lock()
	m.calls = append(m.calls, line)
	fmt.Fprintf(m.logf, "%s %s\n", time.Now().Format("15:04:05.000"), line)
	m.mu.Unlock()
}

func (m *modelServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.bodies = append(m.bodies, body)
	m.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages") && !strings.HasSuffix(r.URL.Path, "/count_tokens"):
		m.anthropic(w, r, body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/count_tokens"):
		m.log("%s %s (%d bytes)", r.Method, r.URL.Path, len(body))
		writeJSON(w, map[string]any{"input_tokens": len(body) / 4})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses"):
		m.openai(w, r, body)
	case r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, ":streamGenerateContent") || strings.HasSuffix(r.URL.Path, ":generateContent")):
		m.gemini(w, r, body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":countTokens"):
		m.log("%s %s (%d bytes)", r.Method, r.URL.Path, len(body))
		writeJSON(w, map[string]any{"totalTokens": len(body) / 4})
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models"):
		m.log("%s %s", r.Method, r.URL.Path)
		writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{"id": "test-model", "object": "model", "owned_by": "klock"}}, "models": []any{}})
	default:
		m.log("%s %s (%d bytes): not served (404)", r.Method, r.URL.Path, len(body))
		http.NotFound(w, r)
	}
}

// next is the step a conversation with done tool results is at, the last
// of them lastOutput (kept for outputs, once).
func (m *modelServer) next(done int, lastOutput string) step {
	m.mu.Lock()
	defer m.mu.Unlock()
	if done > 0 && len(m.toolOutputs) < done {
		m.toolOutputs = append(m.toolOutputs, lastOutput)
	}
	if done < len(m.script) {
		return m.script[done]
	}
	return textStep("done")
}

// decode reads a request's JSON body into req; on an error it answers 400
// and reports false.
func (m *modelServer) decode(w http.ResponseWriter, r *http.Request, body []byte, req any) bool {
	if err := json.Unmarshal(body, req); err != nil {
		m.log("POST %s: bad JSON: %v", r.URL.Path, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// sseWriter starts a server-sent events answer on w and returns what
// writes one event (its data as JSON), flushed at once.
func sseWriter(w http.ResponseWriter) func(event string, data any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	return func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func toolNames(tools []json.RawMessage) []string {
	var names []string
	for _, raw := range tools {
		var t struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		json.Unmarshal(raw, &t)
		switch {
		case t.Name != "":
			names = append(names, t.Name)
		case t.Function.Name != "":
			names = append(names, t.Function.Name)
		default:
			names = append(names, t.Type)
		}
	}
	return names
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---- Anthropic Messages API ----

func (m *modelServer) anthropic(w http.ResponseWriter, r *http.Request, body []byte) {
	var req struct {
		Model    string            `json:"model"`
		Stream   bool              `json:"stream"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if !m.decode(w, r, body, &req) {
		return
	}
	done := 0
	var lastOutput string
	for _, msg := range req.Messages {
		var blocks []struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(msg.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				done++
				lastOutput = string(b.Content)
			}
		}
	}
	names := toolNames(req.Tools)
	main := has(names, "Bash")
	var content []map[string]any
	stop := "end_turn"
	var st step
	if !main {
		content = []map[string]any{{"type": "text", "text": "ok"}}
	} else {
		st = m.next(done, lastOutput)
		id := fmt.Sprintf("toolu_%02d_%d", done, time.Now().UnixNano()%1e6)
		switch {
		case st.writePath != "":
			content = []map[string]any{{"type": "tool_use", "id": id, "name": "Write", "input": map[string]any{"file_path": st.writePath, "content": st.writeContent}}}
			stop = "tool_use"
		case st.shell != "":
			content = []map[string]any{{"type": "tool_use", "id": id, "name": "Bash", "input": map[string]any{"command": st.shell, "description": "scripted step"}}}
			stop = "tool_use"
		default:
			content = []map[string]any{{"type": "text", "text": st.text}}
		}
	}
	m.log("POST %s model=%s stream=%v messages=%d tools=%d main=%v step=%d -> %s (%d bytes)", r.URL.Path, req.Model, req.Stream, len(req.Messages), len(names), main, done, describe(content), len(body))
	inTok, outTok := len(body)/4+1, 20
	usage := map[string]any{"input_tokens": inTok, "output_tokens": outTok, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msgID := fmt.Sprintf("msg_%d", time.Now().UnixNano())
	if !req.Stream {
		writeJSON(w, map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": req.Model, "content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	streamMessage(w, msgID, req.Model, content, stop, inTok, outTok)
}

// streamMessage writes a Messages API answer as the API streams it: the
// message, each content block (a tool's input in two pieces), its end.
func streamMessage(w http.ResponseWriter, msgID, model string, content []map[string]any, stop string, inTok, outTok int) {
	sse := sseWriter(w)
	sse("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inTok, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	for i, c := range content {
		switch c["type"] {
		case "text":
			sse("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			sse("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": c["text"]}})
		case "tool_use":
			sse("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": c["id"], "name": c["name"], "input": map[string]any{}}})
			js, _ := json.Marshal(c["input"])
			// In two pieces, as the API streams a tool's input.
			half := len(js) / 2
			sse("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(js[:half])}})
			sse("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(js[half:])}})
		}
		sse("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	sse("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": outTok}})
	sse("message_stop", map[string]any{"type": "message_stop"})
}

func describe(content []map[string]any) string {
	var parts []string
	for _, c := range content {
		switch c["type"] {
		case "text":
			parts = append(parts, fmt.Sprintf("text %q", c["text"]))
		case "tool_use":
			js, _ := json.Marshal(c["input"])
			if len(js) > 160 {
				js = append(js[:160], "..."...)
			}
			parts = append(parts, fmt.Sprintf("%s %s", c["name"], js))
		}
	}
	return strings.Join(parts, "; ")
}

// ---- OpenAI Responses API ----

func (m *modelServer) openai(w http.ResponseWriter, r *http.Request, body []byte) {
	var req struct {
		Model  string            `json:"model"`
		Stream bool              `json:"stream"`
		Tools  []json.RawMessage `json:"tools"`
		Input  []struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if !m.decode(w, r, body, &req) {
		return
	}
	done := 0
	var lastOutput string
	for _, in := range req.Input {
		if in.Type == "function_call_output" || in.Type == "custom_tool_call_output" {
			done++
			lastOutput = string(in.Output)
		}
	}
	names := toolNames(req.Tools)
	// The shell tool Codex offers, and how its arguments look.
	shellTool := ""
	for _, n := range []string{"exec_command", "shell_command", "shell"} {
		if has(names, n) {
			shellTool = n
			break
		}
	}
	var item map[string]any
	var st step
	if shellTool == "" {
		st = textStep("ok")
	} else {
		st = m.next(done, lastOutput)
	}
	cmd := st.shell
	if st.writePath != "" {
		cmd = fmt.Sprintf("mkdir -p %s && printf '%%s' %s > %s", shq(dirOf(st.writePath)), shq(st.writeContent), shq(st.writePath))
	}
	respID := fmt.Sprintf("resp_%d", time.Now().UnixNano())
	if cmd != "" {
		var args any
		switch shellTool {
		case "exec_command":
			args = map[string]any{"cmd": cmd}
		case "shell_command":
			args = map[string]any{"command": cmd}
		default:
			args = map[string]any{"command": []string{"bash", "-lc", cmd}}
		}
		js, _ := json.Marshal(args)
		item = map[string]any{"type": "function_call", "id": "fc_" + respID, "call_id": fmt.Sprintf("call_%02d_%s", done, respID[5:]), "name": shellTool, "arguments": string(js), "status": "completed"}
	} else {
		item = map[string]any{"type": "message", "id": "msg_" + respID, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": st.text, "annotations": []any{}}}}
	}
	m.log("POST %s model=%s stream=%v input=%d tools=%v step=%d -> %v (%d bytes)", r.URL.Path, req.Model, req.Stream, len(req.Input), names, done, brief(item), len(body))
	inTok, outTok := len(body)/4+1, 20
	usage := map[string]any{"input_tokens": inTok, "output_tokens": outTok, "total_tokens": inTok + outTok,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	resp := func(status string, output []any, u any) map[string]any {
		r := map[string]any{"id": respID, "object": "response", "created_at": time.Now().Unix(), "status": status, "model": req.Model, "output": output}
		if u != nil {
			r["usage"] = u
		}
		return r
	}
	if !req.Stream {
		writeJSON(w, resp("completed", []any{item}, usage))
		return
	}
	streamResponse(w, item, st.text, resp, usage)
}

// streamResponse writes a Responses API answer of the one output item as
// the API streams it (a function call's arguments, or the text, then the
// item done); resp makes the response object for a status.
func streamResponse(w http.ResponseWriter, item map[string]any, text string, resp func(status string, output []any, u any) map[string]any, usage any) {
	write, seq := sseWriter(w), 0
	sse := func(event string, data map[string]any) {
		data["type"] = event
		data["sequence_number"] = seq
		seq++
		write(event, data)
	}
	sse("response.created", map[string]any{"response": resp("in_progress", []any{}, nil)})
	added := map[string]any{}
	for k, v := range item {
		added[k] = v
	}
	added["status"] = "in_progress"
	if item["type"] == "function_call" {
		added["arguments"] = ""
	} else {
		added["content"] = []any{}
	}
	sse("response.output_item.added", map[string]any{"output_index": 0, "item": added})
	if item["type"] == "function_call" {
		sse("response.function_call_arguments.delta", map[string]any{"output_index": 0, "item_id": item["id"], "delta": item["arguments"]})
		sse("response.function_call_arguments.done", map[string]any{"output_index": 0, "item_id": item["id"], "arguments": item["arguments"]})
	} else {
		sse("response.content_part.added", map[string]any{"output_index": 0, "item_id": item["id"], "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		sse("response.output_text.delta", map[string]any{"output_index": 0, "item_id": item["id"], "content_index": 0, "delta": text})
		sse("response.output_text.done", map[string]any{"output_index": 0, "item_id": item["id"], "content_index": 0, "text": text})
		sse("response.content_part.done", map[string]any{"output_index": 0, "item_id": item["id"], "content_index": 0, "part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
	}
	sse("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	sse("response.completed", map[string]any{"response": resp("completed", []any{item}, usage)})
}

func brief(item map[string]any) string {
	if item["type"] == "function_call" {
		a := fmt.Sprint(item["arguments"])
		if len(a) > 160 {
			a = a[:160] + "..."
		}
		return fmt.Sprintf("%s %s", item["name"], a)
	}
	return fmt.Sprintf("message %v", item["content"])
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func dirOf(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return "/"
}

// ---- Gemini API (generateContent) ----

func (m *modelServer) gemini(w http.ResponseWriter, r *http.Request, body []byte) {
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				FunctionResponse json.RawMessage `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	if !m.decode(w, r, body, &req) {
		return
	}
	done := 0
	var lastOutput string
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			if len(p.FunctionResponse) > 0 {
				done++
				lastOutput = string(p.FunctionResponse)
			}
		}
	}
	var names []string
	for _, t := range req.Tools {
		for _, f := range t.FunctionDeclarations {
			names = append(names, f.Name)
		}
	}
	main := has(names, "run_shell_command")
	var part map[string]any
	switch {
	case !main && req.GenerationConfig.ResponseMimeType == "application/json":
		// The CLI's own checks (who speaks next, loop detection).
		part = map[string]any{"text": `{"next_speaker": "user", "reasoning": "the scripted model is done", "is_loop": false}`}
	case !main:
		part = map[string]any{"text": "ok"}
	default:
		st := m.next(done, lastOutput)
		switch {
		case st.writePath != "":
			part = map[string]any{"functionCall": map[string]any{"name": "write_file", "args": map[string]any{"file_path": st.writePath, "content": st.writeContent}}}
		case st.shell != "":
			part = map[string]any{"functionCall": map[string]any{"name": "run_shell_command", "args": map[string]any{"command": st.shell, "description": "scripted step"}}}
		default:
			part = map[string]any{"text": st.text}
		}
	}
	js, _ := json.Marshal(part)
	if len(js) > 200 {
		js = append(js[:200], "..."...)
	}
	m.log("POST %s contents=%d tools=%v step=%d -> %s (%d bytes)", r.URL.Path, len(req.Contents), names, done, js, len(body))
	inTok, outTok := len(body)/4+1, 20
	resp := map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": inTok, "candidatesTokenCount": outTok, "totalTokenCount": inTok + outTok},
		"modelVersion":  "scripted",
	}
	if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		writeJSON(w, resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	b, _ := json.Marshal(resp)
	fmt.Fprintf(w, "data: %s\r\n\r\n", b)
}
