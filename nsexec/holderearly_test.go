package nsexec

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

type lateChild struct{}

func (lateChild) Setup([]byte, func(string)) ([]*os.File, []byte, error) { return nil, nil, nil }

// A holder started from package initialisation runs there only when the
// driver it names is registered already; a driver whose package has not
// run its init function yet leaves the holder to Init (from main), where
// it would otherwise fail with "no network driver".
func TestHolderDriverReady(t *testing.T) {
	start := func(name string) envelope {
		body, err := json.Marshal(startHolder{Driver: name})
		if err != nil {
			t.Fatal(err)
		}
		return envelope{Kind: msgStartHolder, Body: body}
	}
	const name = "test/late-driver"
	if holderDriverReady(start(name)) {
		t.Fatalf("driver %q not registered yet, but the holder would run at package init", name)
	}
	RegisterNetChild(name, lateChild{})
	t.Cleanup(func() {
		netChildMu.Lock()
		delete(netChilds, name)
		netChildMu.Unlock()
	})
	if !holderDriverReady(start(name)) {
		t.Fatalf("driver %q registered, but the holder would wait for main", name)
	}
	// A start that does not decode is dispatched at once, to be reported.
	if !holderDriverReady(envelope{Kind: msgStartHolder, Body: json.RawMessage(`"not an object"`)}) {
		t.Fatal("an undecodable start was held for main instead of reported")
	}
}

// A stage whose main did not call Init must not prestart init either:
// that init would be one more re-execution of the same main, which would
// prestart another, and so on until Start refused.
func TestPrestartRefusedInStageWithoutInit(t *testing.T) {
	defer func(a0 string) { os.Args[0] = a0 }(os.Args[0])
	os.Args[0] = stageMarker
	e := Prestart(plan.NetNone, os.Getuid(), os.Getgid(), Options{Stdin: devNull(t), Stdout: devNull(t), Stderr: devNull(t)})
	if e != nil {
		e.Abort()
		t.Fatal("Prestart started init from a stage whose main did not call Init")
	}
}
