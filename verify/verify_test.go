package verify

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func item(id string, st Status) Item {
	return Item{ID: id, Name: id, Run: func(*Env) (Status, string) { return st, "evidence " + id }}
}

func TestReport(t *testing.T) {
	ok := Run(&Env{}, []Item{item("V1", Pass), item("V2", Skip)}, []Item{item("P1", Blocked), item("P2", Inconclusive)})
	if !ok.OK() || ok.ResultLine() != "RESULT: SANDBOX OK (2 checks, 2 probes: 1 blocked, 1 inconclusive)" {
		t.Errorf("ok report: %v %q", ok.OK(), ok.ResultLine())
	}
	for _, bad := range []Report{
		Run(&Env{}, []Item{item("V1", Fail)}, nil),
		Run(&Env{}, nil, []Item{item("P1", Blocked), item("P2", Escaped)}),
	} {
		if bad.OK() || bad.ResultLine() != "RESULT: SANDBOX LEAKING" {
			t.Errorf("a FAIL or an ESCAPED must make it leaking: %q", bad.ResultLine())
		}
	}
	var text bytes.Buffer
	ok.WriteText(&text)
	if lines := strings.Split(strings.TrimSpace(text.String()), "\n"); len(lines) != 5 || !strings.HasPrefix(lines[2], "P1   BLOCKED") {
		t.Errorf("text report:\n%s", text.String())
	}
	var js bytes.Buffer
	if err := ok.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var out struct {
		OK     bool     `json:"ok"`
		Result string   `json:"result"`
		Probes []Result `json:"probes"`
	}
	if err := json.Unmarshal(js.Bytes(), &out); err != nil || !out.OK || len(out.Probes) != 2 || out.Probes[0].Status != Blocked {
		t.Errorf("json report %s (%v)", js.String(), err)
	}
}

func TestIDsUniqueAndEnough(t *testing.T) {
	seen := map[string]bool{}
	for _, it := range append(Checks(), Probes()...) {
		if seen[it.ID] || it.Run == nil || it.Name == "" {
			t.Errorf("item %q duplicated or incomplete", it.ID)
		}
		seen[it.ID] = true
	}
	if len(Checks()) != 20 {
		t.Errorf("%d checks, want V01 to V20", len(Checks()))
	}
}
