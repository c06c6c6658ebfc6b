package userstack

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The relay's conformance suite (issue 15), in the spirit of packetdrill:
// each script is a sequence of steps over the unit harness (a channel
// endpoint for the sandbox's link, the fake dialer's socket pair for the
// host socket); a step makes the sandbox send a segment or the host side
// write, close or read, and then names the exact segments the sandbox
// sees next, in order: flags, sequence and acknowledgment numbers (both
// relative: the sandbox's initial sequence number is 1000, the stack's
// its SYN-ACK's), payload. Windows are the memory budget's (mem.go) and
// are not scripted. Timers (the delayed ACK, retransmission, the window
// probe) are waited for, never timed.

// cseg is a scripted segment; seq and ack are relative.
type cseg struct {
	flags    header.TCPFlags
	seq, ack uint32
	data     string
	urg      uint16
	zeroWnd  bool   // (the sandbox's) an advertised window of 0
	wnd      uint16 // (the sandbox's) its window; 0: 65535 unless zeroWnd
}

func (s cseg) String() string {
	return fmt.Sprintf("%v seq %d ack %d %q", s.flags, s.seq, s.ack, s.data)
}

type cstep struct {
	sandbox   *cseg  // the sandbox sends this
	hostWrite string // the host side writes this
	hostClose bool   // the host side closes
	hostGets  string // the host side reads exactly this next
	hostEOF   bool   // the host side reads its end next
	gone      bool   // the flow is over (waited for)
	expect    []cseg // the sandbox sees exactly these next
}

const (
	ack        = header.TCPFlagAck
	psh        = header.TCPFlagPsh
	fin        = header.TCPFlagFin
	rst        = header.TCPFlagRst
	syn        = header.TCPFlagSyn
	sandboxISN = 1000
)

// handshakeSteps open the connection: the SYN is answered once the dial
// completes, the sandbox's ACK answered by nothing.
var handshakeSteps = []cstep{
	{sandbox: &cseg{flags: syn, seq: 0}, expect: []cseg{{flags: syn | ack, seq: 0, ack: 1}}},
	{sandbox: &cseg{flags: ack, seq: 1, ack: 1}},
}

var conformance = []struct {
	name  string
	steps []cstep
}{
	{"handshake then data both ways", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: ack | psh, seq: 1, ack: 1, data: "hello"}, hostGets: "hello",
			expect: []cseg{{flags: ack, seq: 1, ack: 6}}}, // the delayed ACK
		cstep{hostWrite: "world", expect: []cseg{{flags: ack | psh, seq: 1, ack: 6, data: "world"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 6, ack: 6}},
	)},
	{"FIN from the sandbox first", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: fin | ack, seq: 1, ack: 1}, hostEOF: true,
			expect: []cseg{{flags: ack, seq: 1, ack: 2}}},
		cstep{hostClose: true, expect: []cseg{{flags: fin | ack, seq: 1, ack: 2}}},
		cstep{sandbox: &cseg{flags: ack, seq: 2, ack: 2}, gone: true},
	)},
	{"FIN from the host first", append(append([]cstep{}, handshakeSteps...),
		cstep{hostClose: true, expect: []cseg{{flags: fin | ack, seq: 1, ack: 1}}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 2}},
		cstep{sandbox: &cseg{flags: fin | ack, seq: 1, ack: 2},
			expect: []cseg{{flags: ack, seq: 2, ack: 2}}, gone: true},
	)},
	{"RST: inexact in the window is challenged, exact ends the flow", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: rst, seq: 5}, expect: []cseg{{flags: ack, seq: 1, ack: 1}}},
		cstep{sandbox: &cseg{flags: rst, seq: 1}, hostEOF: true, gone: true},
	)},
	{"zero window: the relay probes, the data waits for the window", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 1, zeroWnd: true}},
		cstep{hostWrite: "data", expect: []cseg{{flags: ack, seq: 0, ack: 1}}}, // the probe, after a timeout
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 1}, expect: []cseg{{flags: ack | psh, seq: 1, ack: 1, data: "data"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 5}},
	)},
	{"the sandbox's window bounds what the relay sends", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 1, wnd: 3}},
		cstep{hostWrite: "abcdef", expect: []cseg{{flags: ack | psh, seq: 1, ack: 1, data: "abc"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 4, wnd: 3}, expect: []cseg{{flags: ack | psh, seq: 4, ack: 1, data: "def"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 7, wnd: 3}},
	)},
	{"the sandbox's zero-window probe and keepalive get the current ACK", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: ack, seq: 0, ack: 1}, expect: []cseg{{flags: ack, seq: 1, ack: 1}}},
		cstep{sandbox: &cseg{flags: ack, seq: 0, ack: 1, data: "x"}, expect: []cseg{{flags: ack, seq: 1, ack: 1}}},
	)},
	{"retransmission of unacknowledged host data", append(append([]cstep{}, handshakeSteps...),
		cstep{hostWrite: "abc", expect: []cseg{
			{flags: ack | psh, seq: 1, ack: 1, data: "abc"},
			{flags: ack | psh, seq: 1, ack: 1, data: "abc"}, // after the retransmission timeout
		}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 4}},
		cstep{hostWrite: "d", expect: []cseg{{flags: ack | psh, seq: 4, ack: 1, data: "d"}}},
	)},
	// RFC 9293 3.10.7.4 (SND.WL1, SND.WL2): the send window is taken only
	// from a segment newer than the one it was last taken from, so that
	// a reordered old segment cannot shrink it.
	{"window: an old ACK arriving late does not shrink the window", append(append([]cstep{}, handshakeSteps...),
		cstep{hostWrite: "abc", expect: []cseg{{flags: ack | psh, seq: 1, ack: 1, data: "abc"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 4}},         // the newer ACK, window 65535
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 1, wnd: 3}}, // sent before it, window 3
		cstep{hostWrite: "defghijklm", expect: []cseg{{flags: ack | psh, seq: 4, ack: 1, data: "defghijklm"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 1, ack: 14}},
	)},
	{"window: an old data segment arriving late does not shrink the window", append(append([]cstep{}, handshakeSteps...),
		// The sandbox sent "xy" with window 3, then an ACK (after "xy")
		// with window 65535; the ACK comes first (a gap: duplicate ACK).
		cstep{sandbox: &cseg{flags: ack, seq: 3, ack: 1}, expect: []cseg{{flags: ack, seq: 1, ack: 1}}},
		cstep{sandbox: &cseg{flags: ack | psh, seq: 1, ack: 1, data: "xy", wnd: 3}, hostGets: "xy",
			expect: []cseg{{flags: ack, seq: 1, ack: 3}}},
		cstep{hostWrite: "abcdefghij", expect: []cseg{{flags: ack | psh, seq: 1, ack: 3, data: "abcdefghij"}}},
		cstep{sandbox: &cseg{flags: ack, seq: 3, ack: 11}},
	)},
	{"out of order: a gap gets a duplicate ACK, nothing past it is taken", append(append([]cstep{}, handshakeSteps...),
		cstep{sandbox: &cseg{flags: ack | psh, seq: 6, ack: 1, data: "world"}, expect: []cseg{{flags: ack, seq: 1, ack: 1}}},
		cstep{sandbox: &cseg{flags: ack | psh, seq: 1, ack: 1, data: "hello"}, hostGets: "hello",
			expect: []cseg{{flags: ack, seq: 1, ack: 6}}},
		cstep{sandbox: &cseg{flags: ack | psh, seq: 6, ack: 1, data: "world"}, hostGets: "world",
			expect: []cseg{{flags: ack, seq: 1, ack: 11}}},
		cstep{sandbox: &cseg{flags: ack | psh, seq: 1, ack: 1, data: "hello"}, // all old: answered at once
			expect: []cseg{{flags: ack, seq: 1, ack: 11}}},
	)},
}

func TestTCPConformance(t *testing.T) {
	for i, sc := range conformance {
		t.Run(sc.name, func(t *testing.T) {
			h := newHarness(t)
			src := netip.AddrPortFrom(jail4, uint16(47000+i))
			dst := netip.MustParseAddrPort("203.0.113.70:80")
			var d dial
			iss := uint32(0)
			buf := make([]byte, 256)
			for n, s := range sc.steps {
				step := fmt.Sprintf("step %d", n+1)
				if s.sandbox != nil {
					c := s.sandbox
					h.send(tcpSeg{src: src, dst: dst, flags: c.flags, seq: sandboxISN + c.seq, ack: iss + c.ack,
						payload: []byte(c.data), urg: c.urg, zeroWnd: c.zeroWnd, wnd: c.wnd}.bytes())
					if c.flags == syn {
						d = h.dialer.next(t)
					}
				}
				if s.hostWrite != "" {
					if _, err := d.peer.Write([]byte(s.hostWrite)); err != nil {
						t.Fatalf("%s: host write: %v", step, err)
					}
				}
				if s.hostClose {
					d.peer.Close()
				}
				if s.hostGets != "" || s.hostEOF {
					_ = d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
				}
				if s.hostGets != "" {
					got := buf[:len(s.hostGets)]
					if _, err := io.ReadFull(d.peer, got); err != nil || string(got) != s.hostGets {
						t.Fatalf("%s: the host read %q, %v; want %q", step, got, err, s.hostGets)
					}
				}
				if s.hostEOF {
					if n, err := d.peer.Read(buf); err == nil || (!errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset")) {
						t.Fatalf("%s: the host read %q, %v; want its end", step, buf[:n], err)
					}
				}
				for _, want := range s.expect {
					o := readOut(t, h.ep)
					if o.proto != header.TCPProtocolNumber {
						t.Fatalf("%s: protocol %d, want TCP %v", step, o.proto, want)
					}
					tc := o.tcp()
					if want.flags&syn != 0 {
						iss = tc.SequenceNumber()
					}
					got := cseg{flags: tc.Flags(), seq: tc.SequenceNumber() - iss, ack: tc.AckNumber() - sandboxISN, data: string(o.tcpPayload())}
					if got.flags != want.flags || got.seq != want.seq || got.ack != want.ack || got.data != want.data {
						t.Fatalf("%s: the sandbox saw %v, want %v", step, got, want)
					}
				}
				for i := 0; s.gone && tcpFlows(h.st) != 0; i++ {
					if i == 4000 { // failsafe, not a timing assertion
						t.Fatalf("%s: the flow outlived its end", step)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			if q := h.ep.NumQueued(); q != 0 {
				t.Errorf("%d segments the script does not name", q)
			}
		})
	}
}
