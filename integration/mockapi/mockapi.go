// Package mockapi is a scripted stand-in for the Anthropic Messages API,
// good enough to drive the real Claude Code CLI (`claude -p ...`)
// non-interactively so that a test can run commands through the agent's
// own Bash tool and read back what they printed.
//
// The server is given a script, a list of shell commands. Every "agentic"
// request (a POST /v1/messages whose tools include one named Bash) is
// answered with an assistant message holding one tool_use block that
// calls Bash with the next command of the script; the tool_result the CLI
// sends back in its following request is recorded. Once the script is
// exhausted the answer is a final text message ("done", stop_reason
// end_turn) and the CLI's session ends.
//
// Which step comes next is derived from the conversation itself (how many
// of the server's own tool_use ids already have a tool_result in the
// request's messages), not from a request counter, so auxiliary requests
// and retries never consume script steps. Auxiliary requests (the CLI's
// small-model calls for titles, topic detection, quota checks...: any
// /v1/messages request that does not offer the Bash tool) get a short
// text answer.
//
// Everything else is answered 404 with an empty JSON object (except
// /v1/messages/count_tokens, which gets a token estimate), and every
// request is recorded (Paths, Requests), so a test can see exactly what
// the CLI tried to reach.
//
// The CLI is pointed at the server with ANTHROPIC_BASE_URL and a dummy
// ANTHROPIC_API_KEY, either in its environment (Env) or in the "env" map
// of $HOME/.claude/settings.json (WriteSettings). Run the CLI only inside
// a network namespace holding nothing but loopback (ListenInNetns serves
// the mock there); see integration/mockapi_test.go.
package mockapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ToolIDPrefix starts the id of every tool_use block the server issues;
// step i (from 0) has id ToolIDPrefix + its number.
const ToolIDPrefix = "toolu_mockapi_"

// FinalText is the text of the answer that ends the session.
const FinalText = "done"

// AuxText is the answer to auxiliary (non-agentic) requests.
const AuxText = "Mock session"

// Request is one request the server received.
type Request struct {
	Method string
	Path   string // the URL path, without the query
	Query  string // the raw query ("beta=true"), if any
	// For POST /v1/messages:
	Model     string
	Stream    bool
	Agentic   bool // the request offered the Bash tool
	Step      int  // agentic: the script step answered (len(script) for the final answer); -1 otherwise
	Tools     []string
	MaxTokens int
}

// Server is the scripted Messages API. Its zero value is not usable; call New.
type Server struct {
	// Logf, if set, receives a line per request (e.g. t.Logf).
	Logf func(format string, args ...any)

	script []string

	mu       sync.Mutex
	results  []string // by step; "" until seen
	seen     []bool
	isError  []bool
	requests []Request
	done     chan struct{}
	doneOnce sync.Once
	srv      *http.Server
}

// New returns a server that plays script, one Bash command per step.
func New(script []string) *Server {
	return &Server{
		script:  append([]string(nil), script...),
		results: make([]string, len(script)),
		seen:    make([]bool, len(script)),
		isError: make([]bool, len(script)),
		done:    make(chan struct{}),
	}
}

// Serve answers requests on l until Close (or until l fails). It returns
// http.ErrServerClosed after Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.srv == nil {
		s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	}
	srv := s.srv
	s.mu.Unlock()
	return srv.Serve(l)
}

// Close stops the server and closes its listeners and connections.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.srv == nil {
		s.srv = &http.Server{}
	}
	srv := s.srv
	s.mu.Unlock()
	return srv.Close()
}

// Results returns the tool_result text the CLI sent back for each script
// step so far, in script order (shorter than the script if the session
// did not get through it all).
func (s *Server) Results() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(s.seen) && s.seen[n] {
		n++
	}
	return append([]string(nil), s.results[:n]...)
}

// ResultIsError reports whether the tool_result of step i was flagged is_error.
func (s *Server) ResultIsError(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return i >= 0 && i < len(s.isError) && s.isError[i]
}

// Paths returns the path of every request received, in order.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := make([]string, len(s.requests))
	for i, r := range s.requests {
		p[i] = r.Path
	}
	return p
}

// Requests returns every request received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Done is closed once the server has sent the final answer (the script
// is exhausted and every step's result has been recorded).
func (s *Server) Done() <-chan struct{} { return s.done }

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf("mockapi: "+format, args...)
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Step: -1}
	body, err := readBody(r)
	if err != nil {
		s.record(req)
		s.logf("%s %s: reading body: %v", r.Method, r.URL, err)
		apiError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.messages(w, req, body)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		s.record(req)
		s.logf("%s %s -> count_tokens", r.Method, r.URL)
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": 1 + len(body)/4})
	default:
		s.record(req)
		s.logf("%s %s -> 404 (%d bytes of body)", r.Method, r.URL, len(body))
		writeJSON(w, http.StatusNotFound, map[string]any{})
	}
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.mu.Unlock()
}

func readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = io.LimitReader(r.Body, 64<<20)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		rd = zr
	}
	return io.ReadAll(rd)
}

// The parts of a Messages API request the server looks at.
type messagesRequest struct {
	Model     string    `json:"model"`
	Stream    bool      `json:"stream"`
	MaxTokens int       `json:"max_tokens"`
	Messages  []message `json:"messages"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or a list of blocks
}

type block struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or a list of blocks
	Text      string          `json:"text"`
	IsError   bool            `json:"is_error"`
}

func blocks(raw json.RawMessage) []block {
	var bs []block
	if json.Unmarshal(raw, &bs) == nil {
		return bs
	}
	return nil
}

// text flattens a tool_result's content (a string or text blocks).
func text(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []string
	for _, b := range blocks(raw) {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func stepID(i int) string { return fmt.Sprintf("%s%03d", ToolIDPrefix, i) }

func stepOf(id string) (int, bool) {
	if !strings.HasPrefix(id, ToolIDPrefix) {
		return 0, false
	}
	var i int
	if _, err := fmt.Sscanf(id[len(ToolIDPrefix):], "%d", &i); err != nil {
		return 0, false
	}
	return i, true
}

func (s *Server) messages(w http.ResponseWriter, req Request, body []byte) {
	var mr messagesRequest
	if err := json.Unmarshal(body, &mr); err != nil {
		s.record(req)
		s.logf("POST /v1/messages: bad JSON: %v", err)
		apiError(w, http.StatusBadRequest, "invalid_request_error", "bad JSON: "+err.Error())
		return
	}
	req.Model, req.Stream, req.MaxTokens = mr.Model, mr.Stream, mr.MaxTokens
	for _, t := range mr.Tools {
		req.Tools = append(req.Tools, t.Name)
		if t.Name == "Bash" {
			req.Agentic = true
		}
	}

	// Record every tool_result answering one of our tool_use blocks, and
	// take the next step to be the first one still unanswered.
	s.mu.Lock()
	for _, m := range mr.Messages {
		if m.Role != "user" {
			continue
		}
		for _, b := range blocks(m.Content) {
			if b.Type != "tool_result" {
				continue
			}
			i, ok := stepOf(b.ToolUseID)
			if !ok || i < 0 || i >= len(s.script) {
				continue
			}
			s.results[i], s.seen[i], s.isError[i] = text(b.Content), true, b.IsError
		}
	}
	step := 0
	for step < len(s.seen) && s.seen[step] {
		step++
	}
	if req.Agentic {
		req.Step = step
	}
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	model := mr.Model
	if model == "" {
		model = "claude-mock"
	}
	var content []map[string]any
	var stop string
	switch {
	case !req.Agentic:
		s.logf("POST /v1/messages model=%s stream=%v tools=%v -> auxiliary text", mr.Model, mr.Stream, req.Tools)
		content = []map[string]any{{"type": "text", "text": AuxText}}
		stop = "end_turn"
	case step < len(s.script):
		s.logf("POST /v1/messages model=%s stream=%v -> step %d: Bash %q", mr.Model, mr.Stream, step, s.script[step])
		content = []map[string]any{{
			"type": "tool_use",
			"id":   stepID(step),
			"name": "Bash",
			"input": map[string]any{
				"command":     s.script[step],
				"description": fmt.Sprintf("mockapi script step %d", step),
			},
		}}
		stop = "tool_use"
	default:
		s.logf("POST /v1/messages model=%s stream=%v -> final %q", mr.Model, mr.Stream, FinalText)
		content = []map[string]any{{"type": "text", "text": FinalText}}
		stop = "end_turn"
		defer s.doneOnce.Do(func() { close(s.done) })
	}
	id := fmt.Sprintf("msg_mockapi_%d", time.Now().UnixNano())
	if mr.Stream {
		stream(w, id, model, content, stop)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":            id,
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage":         usage(10, 10),
	})
}

func usage(in, out int) map[string]any {
	return map[string]any{
		"input_tokens":                in,
		"output_tokens":               out,
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     0,
	}
}

// stream writes content as the Messages API streams it (server-sent
// events): message_start, then per block content_block_start, deltas
// (text_delta or input_json_delta) and content_block_stop, then
// message_delta (stop_reason, usage) and message_stop.
func stream(w http.ResponseWriter, id, model string, content []map[string]any, stop string) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Request-Id", "req_mockapi")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	event := func(name string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if fl != nil {
			fl.Flush()
		}
	}
	event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": usage(10, 1),
	}})
	event("ping", map[string]any{"type": "ping"})
	for i, c := range content {
		switch c["type"] {
		case "text":
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": c["text"]}})
		case "tool_use":
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": c["id"], "name": c["name"], "input": map[string]any{}}})
			in, _ := json.Marshal(c["input"])
			// Split the JSON in two deltas, as the API does (the client
			// must concatenate partial_json before parsing).
			half := len(in) / 2
			for _, part := range [][]byte{in[:half], in[half:]} {
				event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": string(part)}})
			}
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10}})
	event("message_stop", map[string]any{"type": "message_stop"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}
