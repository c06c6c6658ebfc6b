package nsexec

// The stage protocol: every message between the launcher and the stages it
// re-executes, in one place.
//
// Each stage talks to its parent over its own SOCK_STREAM socket (fd 3 in
// the stage) carrying JSON envelopes {"kind": ..., "body": {...}}; a
// second socket, SEQPACKET, carries descriptors (SCM_RIGHTS, one tagged
// descriptor a datagram: the jail's TUN links, the pty's master).
//
// Without the egress jail (--net=none, --net=host):
//
//	launcher                                       init (PID 1)          command
//	   |  clone(NEWUSER|NEWNS|NEWPID|...[NEWNET])  -> |
//	   | <------------------------------ hello ------ |
//	   | --- start-init {plan, tty, pty fds, size} -> |
//	   | <------------------------ warning {text} --- |  limit pids, mounts,
//	   |                                              |  lo, drop privileges,
//	   |                                              |  seccomp
//	   |                                              | -- fork+exec -------> |
//	   | <------------------------ started {pid} ---- |
//	   | <== fd: pty master (tag 'p'; with a tty) === |
//	   | --- signal {signal} ------------------------> |  kill(command, signal)
//	   |            ... until the command ends; init exits with its status
//
// With the egress jail (--net=jail), the holder creates the jail's user
// and network namespaces and starts init in namespaces nested below them,
// as the launcher's child (CLONE_PARENT); once its child driver has built
// the jail's network it hands over the driver's descriptors and exits:
//
//	launcher                      holder                             init
//	   | clone(NEWUSER|NEWNET) -----> |
//	   | <------------- hello ------- |
//	   | -- start-holder {driver, --> |
//	   |    data, clone flags}        | clone(PARENT|NEWUSER|NEWNS|...) -> |
//	   | <-- init-started {pid} ----- |                                    |
//	   | -- start-init {plan, ..., wait-go} ---------------------------------> |
//	   |                              | child driver's Setup(data):        | mounts, ...
//	   |                              |   TUN links, routes, filter,       |
//	   |                              |   netlink sockets                  |
//	   | <------ warning {text} ----- |                                    |
//	   | <== fds (tag 'n') ========== |                                    |
//	   | <-- net-ready {files, reply} |                                    |
//	   | reaps the holder            exit 0                                |
//	   | <------------------------------------------------------ hello ------ |
//	   | Jail.Attach(fds, reply)                                            |
//	   | -- go -------------------------------------------------------------> |
//	   | <------------------------------------------------ started {pid} --- |
//	   |            ... then as without the jail: pty, signals, status
//
// Either stage may send warning {text} at any point before its last
// message, and error {text, code} instead of any message it owes: the
// launch then fails with that exit status. Anything else out of turn
// fails the launch too ([channel.expect]): a message is never dropped
// unread, and a body with a field its receiver does not know is refused.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

// stageMarker is argv[0] of a re-executed stage. It only says "look at fd
// 3"; what to do comes over that socket.
const stageMarker = "claude-sandbox:stage"

// holderArg, as argv[1] of a stage, says the start to come is a holder's:
// a hint only (the start message still decides), so that the holder skips
// warming init's start decoders (warmStartDecoders), about 70 kB of
// allocations it would never use (issue 33).
const holderArg = "holder"

// stageFD is the inherited socket a stage talks to its parent on; ptyFD
// carries tagged descriptors (the pty master, TUN links) to the launcher.
const (
	stageFD = 3
	ptyFD   = 4
)

// initChanFD is where the holder receives the launcher's channel for init;
// it becomes init's stageFD.
const initChanFD = 5

// fd-channel tags: which descriptor is arriving.
const (
	fdTagNet = 'n' // the jail's child driver's (TUN links, sockets)
	fdTagPTY = 'p'
)

// msgKind names a message; its body is the payload type named beside it.
type msgKind string

const (
	msgHello       msgKind = "hello"        // stage -> parent, first: no body
	msgStartInit   msgKind = "start-init"   // -> init: startInit
	msgStartHolder msgKind = "start-holder" // launcher -> holder: startHolder
	msgWarning     msgKind = "warning"      // stage -> launcher: warning
	msgError       msgKind = "error"        // stage -> launcher: stageFailure
	msgInitStarted msgKind = "init-started" // holder -> launcher: pidMsg
	msgNetReady    msgKind = "net-ready"    // holder -> launcher: netReady
	msgGo          msgKind = "go"           // launcher -> init: no body
	msgStarted     msgKind = "started"      // init -> launcher: pidMsg
	msgSignal      msgKind = "signal"       // launcher -> init: signalMsg
)

// startInit is init's start: the plan and how its stdio is set up.
type startInit struct {
	Plan *plan.Plan `json:"plan"`
	// TTY: the command gets a pty from the sandbox's devpts in place of
	// the fds PTYFds, starting with the host terminal's size and settings.
	TTY     bool          `json:"tty,omitempty"`
	PTYFds  []int         `json:"ptyFds,omitempty"`
	Winsize *unix.Winsize `json:"winsize,omitempty"`
	Termios *unix.Termios `json:"termios,omitempty"`
	// WaitGo makes init wait for "go" before it starts the command (the
	// egress jail is still being built).
	WaitGo bool `json:"waitGo,omitempty"`
	// PidsCgroup: the launcher bounds the sandbox with a pids cgroup
	// (init is moved into it before the command starts), so init need
	// not fall back when it cannot set pid_max; otherwise PidsNoCgroup
	// says why there is none, for the warning.
	PidsCgroup   bool   `json:"pidsCgroup,omitempty"`
	PidsNoCgroup string `json:"pidsNoCgroup,omitempty"`
	// Ignored: the signals the launcher's process started with ignored
	// (of SIGHUP and SIGINT, see startIgnored); the command starts with
	// them ignored too.
	Ignored []int `json:"ignored,omitempty"`
}

// startHolder is the holder's start: the jail's child driver (see
// netdriver.go) and its opaque data, and the clone flags for init.
type startHolder struct {
	Driver    string  `json:"driver"`
	Data      []byte  `json:"data"`
	CloneInit uintptr `json:"cloneInit"`
}

// netReady says the child driver has set the jail's namespace up: Files
// descriptors (tagged fdTagNet) were sent before it, and Reply is its
// opaque data for the Jail's Attach.
type netReady struct {
	Files int    `json:"files"`
	Reply []byte `json:"reply,omitempty"`
}

// warning is a degraded-but-allowed condition, for the user.
type warning struct {
	Text string `json:"text"`
}

// stageFailure is why a stage failed, and the exit status to report.
type stageFailure struct {
	Text string `json:"text"`
	Code int    `json:"code"`
}

func (f *stageFailure) Error() string { return f.Text }

// exitCode is the status the launch reports for the failure.
func (f *stageFailure) exitCode() int {
	if f.Code == 0 {
		return ExitSetup
	}
	return f.Code
}

// pidMsg carries a pid: init's in the launcher's PID namespace
// (init-started), the command's inside the sandbox (started).
type pidMsg struct {
	PID int `json:"pid"`
}

// signalMsg asks init to send Signal to the command.
type signalMsg struct {
	Signal int `json:"signal"`
}

// envelope is a message on the wire.
type envelope struct {
	Kind msgKind         `json:"kind"`
	Body json.RawMessage `json:"body,omitempty"`
}

// channel is one end of a stage's JSON socket.
type channel struct {
	peer string // who is at the other end: "init", "holder", "launcher"
	w    io.Writer
	dec  *json.Decoder
	// log receives each message sent and received, at debug level (the
	// launcher's channels; nil: none).
	log *slog.Logger
	// warn receives the warnings that arrive while expect waits; nil: a
	// warning is as unexpected as any other message.
	warn func(string)
}

func newChannel(rw io.ReadWriter, peer string) *channel {
	return &channel{peer: peer, w: rw, dec: json.NewDecoder(rw)}
}

// send sends a message of kind with body (nil for none).
func (c *channel) send(kind msgKind, body any) error {
	m, err := encodeMsg(kind, body)
	if err != nil {
		return err
	}
	return c.sendEncoded(m)
}

// encodedMsg is a message encoded ahead of its sending (the launcher
// encodes init's start while init is still starting).
type encodedMsg struct {
	e    envelope
	wire []byte // the envelope's JSON and a newline
}

func encodeMsg(kind msgKind, body any) (*encodedMsg, error) {
	e := envelope{Kind: kind}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", kind, err)
		}
		e.Body = b
	}
	wire, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	return &encodedMsg{e: e, wire: append(wire, '\n')}, nil
}

// sendEncoded sends a message encodeMsg made.
func (c *channel) sendEncoded(m *encodedMsg) error {
	c.debug("stage message sent", m.e)
	_, err := c.w.Write(m.wire)
	return err
}

// recv reads the next message, whatever its kind.
func (c *channel) recv() (envelope, error) {
	var e envelope
	if err := c.dec.Decode(&e); err != nil {
		return e, err
	}
	c.debug("stage message received", e)
	if e.Kind == "" {
		return e, &protocolError{peer: c.peer, err: errors.New("a message without a kind")}
	}
	return e, nil
}

func (c *channel) debug(what string, e envelope) {
	if c.log == nil {
		return
	}
	attrs := []any{"peer", c.peer, "kind", string(e.Kind), "bytes", len(e.Body)}
	// Start messages carry the command's environment: their size only.
	if e.Kind != msgStartInit && len(e.Body) > 0 {
		attrs = append(attrs, "body", string(e.Body))
	}
	c.log.Debug(what, attrs...)
}

// expect reads the next message and decodes its body into body (nil: the
// kind has none). Warnings on the way go to c.warn; an error message
// becomes a *stageFailure; any other kind than want, or a body that does
// not decode strictly, is a *protocolError. A failed read is returned as
// it is (io.EOF: the stage ended).
func (c *channel) expect(want msgKind, body any) error {
	for {
		e, err := c.recv()
		if err != nil {
			return err
		}
		switch {
		case e.Kind == want:
			return c.decode(e, body)
		case e.Kind == msgWarning && c.warn != nil:
			var w warning
			if err := c.decode(e, &w); err != nil {
				return err
			}
			c.warn(w.Text)
		case e.Kind == msgError:
			var f stageFailure
			if err := c.decode(e, &f); err != nil {
				return err
			}
			return &f
		default:
			return &protocolError{peer: c.peer, err: fmt.Errorf("%q arrived where %q was due", e.Kind, want)}
		}
	}
}

// decode decodes e's body into body, refusing unknown fields; nil body
// refuses any body at all.
func (c *channel) decode(e envelope, body any) error {
	if body == nil {
		if len(e.Body) != 0 && !bytes.Equal(e.Body, []byte("null")) {
			return &protocolError{peer: c.peer, err: fmt.Errorf("%q carries a body it should not have", e.Kind)}
		}
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(e.Body))
	d.DisallowUnknownFields()
	if err := d.Decode(body); err != nil {
		return &protocolError{peer: c.peer, err: fmt.Errorf("%q: %w", e.Kind, err)}
	}
	return nil
}

// protocolError is a message out of turn or malformed: a bug, or a stage
// binary from another version. The launch fails on it.
type protocolError struct {
	peer string
	err  error
}

func (e *protocolError) Error() string {
	return fmt.Sprintf("stage protocol with %s: %v (is the stage binary from the same version of claude-sandbox?)", e.peer, e.err)
}

func (e *protocolError) Unwrap() error { return e.err }

// Exit statuses the engine itself uses, after the conventions of env(1)
// and container runtimes: the command's own status passes through
// untouched, 128+N reports death by signal N.
const (
	ExitSetup      = 125 // the sandbox could not be built
	ExitCannotExec = 126 // the command exists but cannot be executed
	ExitNotFound   = 127 // the command was not found
)
