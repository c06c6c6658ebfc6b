package mockapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// sse is one server-sent event.
type sse struct {
	name string
	data map[string]any
}

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+"/v1/messages?beta=true", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return resp
}

func readSSE(t *testing.T, r io.Reader) []sse {
	t.Helper()
	var evs []sse
	var cur sse
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("bad data line %q: %v", line, err)
			}
		case line == "":
			if cur.name != "" {
				if cur.data["type"] != cur.name {
					t.Errorf("event %s carries type %v", cur.name, cur.data["type"])
				}
				evs = append(evs, cur)
			}
			cur = sse{}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// assemble rebuilds the message a client would from the events, checking
// their order.
func assemble(t *testing.T, evs []sse) (content []map[string]any, stop string) {
	t.Helper()
	var names []string
	partial := map[int]string{}
	for _, e := range evs {
		names = append(names, e.name)
		switch e.name {
		case "content_block_start":
			content = append(content, e.data["content_block"].(map[string]any))
		case "content_block_delta":
			i := int(e.data["index"].(float64))
			d := e.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				content[i]["text"] = content[i]["text"].(string) + d["text"].(string)
			case "input_json_delta":
				partial[i] += d["partial_json"].(string)
			default:
				t.Errorf("unexpected delta %v", d)
			}
		case "content_block_stop":
			i := int(e.data["index"].(float64))
			if p, ok := partial[i]; ok {
				var in map[string]any
				if err := json.Unmarshal([]byte(p), &in); err != nil {
					t.Fatalf("input_json_delta parts do not make JSON: %q", p)
				}
				content[i]["input"] = in
			}
		case "message_delta":
			stop, _ = e.data["delta"].(map[string]any)["stop_reason"].(string)
			if _, ok := e.data["usage"].(map[string]any)["output_tokens"]; !ok {
				t.Errorf("message_delta without usage.output_tokens")
			}
		}
	}
	if len(names) < 2 || names[0] != "message_start" || names[len(names)-1] != "message_stop" || names[len(names)-2] != "message_delta" {
		t.Errorf("event sequence %v", names)
	}
	return content, stop
}

var bashTool = []map[string]any{{"name": "Bash", "input_schema": map[string]any{"type": "object"}}}

func TestScript(t *testing.T) {
	s := New([]string{"echo one", "echo two"})
	s.Logf = t.Logf
	hs := httptest.NewServer(s)
	defer hs.Close()

	user := map[string]any{"role": "user", "content": "go"}
	// Step 0, streamed.
	resp := post(t, hs.URL, map[string]any{"model": "m", "stream": true, "messages": []any{user}, "tools": bashTool})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	content, stop := assemble(t, readSSE(t, resp.Body))
	if stop != "tool_use" || len(content) != 1 || content[0]["type"] != "tool_use" || content[0]["name"] != "Bash" {
		t.Fatalf("step 0: stop %q content %v", stop, content)
	}
	if want := map[string]any{"command": "echo one", "description": "mockapi script step 0"}; !reflect.DeepEqual(content[0]["input"], want) {
		t.Errorf("step 0 input %v, want %v", content[0]["input"], want)
	}
	id0 := content[0]["id"].(string)

	// An auxiliary request (no Bash tool) in between takes no step.
	resp = post(t, hs.URL, map[string]any{"model": "small", "max_tokens": 1, "messages": []any{map[string]any{"role": "user", "content": "quota"}}})
	var aux struct {
		Content    []map[string]any `json:"content"`
		StopReason string           `json:"stop_reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&aux); err != nil {
		t.Fatal(err)
	}
	if aux.StopReason != "end_turn" || len(aux.Content) != 1 || aux.Content[0]["text"] != AuxText {
		t.Errorf("aux answer %+v", aux)
	}

	// Step 1, not streamed: the result of step 0 comes as a string.
	asst0 := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id0, "name": "Bash", "input": map[string]any{"command": "echo one"}}}}
	res0 := map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id0, "content": "one"}}}
	resp = post(t, hs.URL, map[string]any{"model": "m", "messages": []any{user, asst0, res0}, "tools": bashTool})
	var msg struct {
		Type       string           `json:"type"`
		Role       string           `json:"role"`
		Content    []map[string]any `json:"content"`
		StopReason string           `json:"stop_reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || msg.StopReason != "tool_use" || len(msg.Content) != 1 {
		t.Fatalf("step 1: %+v", msg)
	}
	if in := msg.Content[0]["input"].(map[string]any); in["command"] != "echo two" {
		t.Errorf("step 1 input %v", in)
	}
	id1 := msg.Content[0]["id"].(string)
	if got := s.Results(); !reflect.DeepEqual(got, []string{"one"}) {
		t.Errorf("results after step 0: %q", got)
	}

	// The final answer: step 1's result comes as text blocks, flagged an error.
	asst1 := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id1, "name": "Bash", "input": map[string]any{"command": "echo two"}}}}
	res1 := map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id1, "is_error": true,
		"content": []any{map[string]any{"type": "text", "text": "Exit code 1"}, map[string]any{"type": "text", "text": "two"}}}}}
	select {
	case <-s.Done():
		t.Fatal("done before the final answer")
	default:
	}
	resp = post(t, hs.URL, map[string]any{"model": "m", "stream": true, "messages": []any{user, asst0, res0, asst1, res1}, "tools": bashTool})
	content, stop = assemble(t, readSSE(t, resp.Body))
	if stop != "end_turn" || len(content) != 1 || content[0]["type"] != "text" || content[0]["text"] != FinalText {
		t.Fatalf("final: stop %q content %v", stop, content)
	}
	<-s.Done()
	if got, want := s.Results(), []string{"one", "Exit code 1\ntwo"}; !reflect.DeepEqual(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
	if s.ResultIsError(0) || !s.ResultIsError(1) {
		t.Errorf("is_error flags: %v %v", s.ResultIsError(0), s.ResultIsError(1))
	}

	// Anything else: 404, recorded.
	r404, err := http.Get(hs.URL + "/api/hello")
	if err != nil {
		t.Fatal(err)
	}
	r404.Body.Close()
	if r404.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path: status %d", r404.StatusCode)
	}
	want := []string{"/v1/messages", "/v1/messages", "/v1/messages", "/v1/messages", "/api/hello"}
	if got := s.Paths(); !reflect.DeepEqual(got, want) {
		t.Errorf("paths %q, want %q", got, want)
	}
	reqs := s.Requests()
	if reqs[1].Agentic || reqs[1].Step != -1 || reqs[3].Step != 2 || reqs[0].Query != "beta=true" {
		t.Errorf("requests %+v", reqs)
	}
}
