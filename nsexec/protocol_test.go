package nsexec

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// pipeChannel returns a channel reading what the returned writer's
// channel sends.
func pipeChannel(t *testing.T) (from, to *channel) {
	t.Helper()
	var buf bytes.Buffer
	return newChannel(&buf, "test"), newChannel(&buf, "test")
}

func TestExpectTakesWarningsOnTheWay(t *testing.T) {
	a, b := pipeChannel(t)
	var got []string
	b.warn = func(s string) { got = append(got, s) }
	_ = a.send(msgWarning, warning{Text: "one"})
	_ = a.send(msgStarted, pidMsg{PID: 7})
	var p pidMsg
	if err := b.expect(msgStarted, &p); err != nil || p.PID != 7 {
		t.Fatalf("expect: %v, %+v", err, p)
	}
	if len(got) != 1 || got[0] != "one" {
		t.Fatalf("warnings %q", got)
	}
}

func TestExpectFailsOnAnythingElse(t *testing.T) {
	for name, send := range map[string]func(*channel){
		"other kind":    func(c *channel) { _ = c.send(msgNetReady, netReady{}) },
		"unknown field": func(c *channel) { _ = c.send(msgStarted, map[string]int{"pid": 1, "extra": 2}) },
		"body where none is due": func(c *channel) {
			_ = c.send(msgHello, pidMsg{PID: 1})
		},
		// Without a warn handler (the stages' side), a warning is out
		// of turn too.
		"warning without handler": func(c *channel) { _ = c.send(msgWarning, warning{Text: "x"}) },
	} {
		a, b := pipeChannel(t)
		send(a)
		want := msgStarted
		if name == "body where none is due" {
			want = msgHello
		}
		var p pidMsg
		var body any = &p
		if want == msgHello {
			body = nil
		}
		var pe *protocolError
		if err := b.expect(want, body); !errors.As(err, &pe) {
			t.Errorf("%s: expect returned %v, want a protocol error", name, err)
		}
	}
}

func TestExpectStageFailure(t *testing.T) {
	a, b := pipeChannel(t)
	_ = a.send(msgError, stageFailure{Text: "no such command", Code: ExitNotFound})
	err := b.expect(msgStarted, &pidMsg{})
	var f *stageFailure
	if !errors.As(err, &f) || f.exitCode() != ExitNotFound || f.Text != "no such command" {
		t.Fatalf("expect returned %v", err)
	}
	if err := b.expect(msgStarted, &pidMsg{}); err != io.EOF {
		t.Fatalf("after the last message: %v, want EOF", err)
	}
}

func TestChannelDebugLogHidesThePlan(t *testing.T) {
	a, b := pipeChannel(t)
	var log bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_ = a.send(msgStartInit, startInit{TTY: true})
	_ = a.send(msgSignal, signalMsg{Signal: 15})
	var s startInit
	if err := b.expect(msgStartInit, &s); err != nil || !s.TTY {
		t.Fatalf("expect: %v", err)
	}
	out := log.String()
	if !strings.Contains(out, "kind=start-init") || strings.Contains(out, "tty") {
		t.Errorf("the start message's body reached the log, or the message did not:\n%s", out)
	}
	if !strings.Contains(out, `kind=signal`) || !strings.Contains(out, `signal\":15`) {
		t.Errorf("the signal message is not logged with its body:\n%s", out)
	}
}
