package userstack

import (
	"bytes"
	"io"
	"math/bits"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The TCP relay's own behaviour toward the sandbox: windows, order,
// retransmission, probes, resets and the end of a flow. Each test plays
// the sandbox's kernel with crafted segments over the in-memory link and
// the remote end with the fake dialer's socket.

// conn is one relayed flow as the sandbox sees it.
type conn struct {
	h        *harness
	src, dst netip.AddrPort
	d        dial
	iss      uint32 // the stack's initial sequence number
	nxt      uint32 // the sandbox's next sequence number
}

// handshake opens a flow from src to dst (no SYN options: an MSS of 536,
// no window scaling).
func handshake(t *testing.T, h *harness, src, dst netip.AddrPort) *conn {
	t.Helper()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	d := h.dialer.next(t)
	synack := readOut(t, h.ep)
	if f := synack.tcp().Flags(); f != header.TCPFlagSyn|header.TCPFlagAck {
		t.Fatalf("got %v, want SYN|ACK", f)
	}
	c := &conn{h: h, src: src, dst: dst, d: d, iss: synack.tcp().SequenceNumber(), nxt: 1001}
	c.seg(header.TCPFlagAck, nil)
	return c
}

// seg sends a segment at the sandbox's next sequence number, acknowledging
// the SYN only, and advances it.
func (c *conn) seg(flags header.TCPFlags, payload []byte) {
	c.at(c.nxt, flags, payload)
	c.nxt += uint32(len(payload))
	if flags.Contains(header.TCPFlagFin) {
		c.nxt++
	}
}

// at sends a segment at seq without advancing.
func (c *conn) at(seq uint32, flags header.TCPFlags, payload []byte) {
	c.h.send(tcpSeg{src: c.src, dst: c.dst, flags: flags, seq: seq, ack: c.iss + 1, payload: payload}.bytes())
}

// ackOf reads segments until a bare one (an ACK) comes and returns it.
func (c *conn) nextAck(t *testing.T) header.TCP {
	t.Helper()
	for {
		o := readOut(t, c.h.ep)
		if len(o.tcpPayload()) == 0 {
			return o.tcp()
		}
	}
}

// openWindow opens the sandbox's window (nothing newly acknowledged) and
// checks the next data segment carries want.
func (c *conn) openWindow(t *testing.T, want string) {
	t.Helper()
	c.h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1}.bytes())
	for {
		if p := readOut(t, c.h.ep).tcpPayload(); len(p) > 0 {
			if string(p) != want {
				t.Fatalf("got %q, want %q", p, want)
			}
			return
		}
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// A host socket that does not read, and a sandbox that ignores the window:
// the relay buffers at most tcpRcvBuf, acknowledges only what it took and
// closes the window; once the host reads, the window reopens, the rest
// can come, and every byte arrives in order.
func TestTCPRelayBuffersForASlowHost(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43000), netip.MustParseAddrPort("203.0.113.20:80"))
	data := pattern(tcpRcvBuf + 2<<20)
	const segSize = 32 << 10
	for off := 0; off < len(data); off += segSize {
		c.at(c.nxt+uint32(off), header.TCPFlagAck|header.TCPFlagPsh, data[off:off+segSize])
	}
	// A keepalive gets the relay's state at once.
	h.ep.Drain()
	c.at(c.nxt-1, header.TCPFlagAck, nil)
	a := c.nextAck(t)
	took := int(a.AckNumber() - c.nxt)
	if took < tcpRcvBuf || took >= len(data) || a.WindowSize() != 0 {
		t.Fatalf("relay took %d of %d bytes with window %d; want at least its %d-byte buffer (plus the socket's), not all, and a closed window",
			took, len(data), a.WindowSize(), tcpRcvBuf)
	}
	got := make([]byte, took)
	if _, err := io.ReadFull(c.d.peer, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:took]) {
		t.Fatal("the host got different bytes")
	}
	// Drained: a window update reopens the window.
	for a.WindowSize() != 0xffff {
		a = c.nextAck(t)
	}
	for off := took; off < len(data); off += segSize {
		c.at(c.nxt+uint32(off), header.TCPFlagAck|header.TCPFlagPsh, data[off:min(off+segSize, len(data))])
	}
	got = make([]byte, len(data)-took)
	if _, err := io.ReadFull(c.d.peer, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[took:]) {
		t.Fatal("the host got different bytes after the window reopened")
	}
}

// A gap is not filled with later data: the relay answers with a duplicate
// ACK and delivers nothing until the missing bytes come.
func TestTCPRelayGapGetsDuplicateAck(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43100), netip.MustParseAddrPort("203.0.113.21:80"))
	c.at(c.nxt+5, header.TCPFlagAck, []byte("world"))
	if a := c.nextAck(t); a.AckNumber() != c.nxt {
		t.Fatalf("ack %d after a gap, want a duplicate ACK of %d", a.AckNumber(), c.nxt)
	}
	c.seg(header.TCPFlagAck, []byte("hello"))
	c.seg(header.TCPFlagAck, []byte("world"))
	got := make([]byte, 10)
	if _, err := io.ReadFull(c.d.peer, got); err != nil || string(got) != "helloworld" {
		t.Fatalf("host got %q, %v", got, err)
	}
	// A retransmission of what was delivered is acknowledged, not
	// delivered twice.
	c.at(c.nxt-5, header.TCPFlagAck, []byte("world"))
	if a := c.nextAck(t); a.AckNumber() != c.nxt {
		t.Fatalf("ack %d after a duplicate, want %d", a.AckNumber(), c.nxt)
	}
	c.seg(header.TCPFlagAck, []byte("!"))
	if _, err := io.ReadFull(c.d.peer, got[:1]); err != nil || got[0] != '!' {
		t.Fatalf("host got %q, %v", got[:1], err)
	}
}

// Host data never goes past the sandbox's window; what the sandbox does
// not acknowledge is sent again; an acknowledgement lets the rest through.
func TestTCPRelayRespectsWindowAndRetransmits(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43200), netip.MustParseAddrPort("203.0.113.22:80"))
	c.h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1, wnd: 1000}.bytes())
	data := pattern(5000)
	go c.d.peer.Write(data)
	seen := map[uint32]bool{}
	var got []byte
	for {
		o := readOut(t, h.ep)
		p := o.tcpPayload()
		if len(p) == 0 {
			continue
		}
		seq := o.tcp().SequenceNumber()
		if end := seq + uint32(len(p)) - (c.iss + 1); end > 1000 {
			t.Fatalf("segment ends at %d, past the window of 1000", end)
		}
		if seen[seq] {
			break // retransmitted after the timeout
		}
		seen[seq] = true
		got = append(got, p...)
	}
	if !bytes.Equal(got, data[:1000]) {
		t.Fatalf("first window: %d bytes, want the first 1000", len(got))
	}
	// Acknowledge them with a wide window: the rest comes.
	c.h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1 + 1000}.bytes())
	for len(got) < len(data) {
		o := readOut(t, h.ep)
		if p := o.tcpPayload(); len(p) > 0 && o.tcp().SequenceNumber() == c.iss+1+uint32(len(got)) {
			got = append(got, p...)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the sandbox got different bytes")
	}
}

// A zero window stops the host data; the relay probes it, and a window
// update lets the data through.
func TestTCPRelayZeroWindow(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43300), netip.MustParseAddrPort("203.0.113.23:80"))
	c.h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1, zeroWnd: true}.bytes())
	go c.d.peer.Write([]byte("data"))
	// The probe: out of window (one before the next sequence number), no
	// data.
	o := readOut(t, h.ep)
	if p := o.tcpPayload(); len(p) != 0 || o.tcp().SequenceNumber() != c.iss {
		t.Fatalf("got %d bytes at %d with a zero window, want a probe at %d", len(p), o.tcp().SequenceNumber(), c.iss)
	}
	c.openWindow(t, "data")
}

// Keepalives and the sandbox's own zero-window probes (a segment just
// before the next sequence number) get an ACK at once.
func TestTCPRelayAnswersKeepalive(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43400), netip.MustParseAddrPort("203.0.113.24:80"))
	c.at(c.nxt-1, header.TCPFlagAck, nil)
	if a := c.nextAck(t); a.AckNumber() != c.nxt {
		t.Fatalf("keepalive answered with ack %d, want %d", a.AckNumber(), c.nxt)
	}
}

// A reset outside the window (a stale or blind one) leaves the flow up;
// one at the next sequence number ends it, and the host socket closes.
func TestTCPRelayResetMustBeInWindow(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43500), netip.MustParseAddrPort("203.0.113.25:80"))
	c.at(c.nxt+(64<<20), header.TCPFlagRst, nil)
	c.seg(header.TCPFlagAck, []byte("alive"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c.d.peer, got); err != nil || string(got) != "alive" {
		t.Fatalf("after a blind reset the host got %q, %v", got, err)
	}
	c.at(c.nxt, header.TCPFlagRst, nil)
	c.d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
	if n, err := c.d.peer.Read(got); err != io.EOF {
		t.Fatalf("after a reset the host read %d bytes, %v; want EOF", n, err)
	}
	c.d.peer.Close()
	h.settle(t)
}

// The host side failing mid-flow resets the sandbox's side.
func TestTCPRelayHostFailureResetsSandbox(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43600), netip.MustParseAddrPort("203.0.113.26:80"))
	c.d.peer.Close()
	// The host's EOF arrives as a FIN; the sandbox's next data then hits a
	// socket whose peer is gone.
	for {
		if o := readOut(t, h.ep); o.tcp().Flags().Contains(header.TCPFlagFin) {
			break
		}
	}
	c.seg(header.TCPFlagAck, []byte("late"))
	for {
		o := readOut(t, h.ep)
		if o.tcp().Flags().Contains(header.TCPFlagRst) {
			break
		}
	}
	h.settle(t)
	if n := tcpFlows(h.st); n != 0 {
		t.Fatalf("%d flows left after the reset", n)
	}
}

// Both sides closing, and both FINs acknowledged, ends the flow: no table
// entry or goroutine is left.
func TestTCPRelayCloseBothWays(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43700), netip.MustParseAddrPort("203.0.113.27:80"))
	c.seg(header.TCPFlagAck|header.TCPFlagFin, []byte("bye"))
	got, err := io.ReadAll(c.d.peer) // the data, then EOF: the FIN was passed on
	if err != nil || string(got) != "bye" {
		t.Fatalf("host got %q, %v", got, err)
	}
	c.d.peer.Close()
	var fin header.TCP
	for fin == nil {
		if o := readOut(t, h.ep); o.tcp().Flags().Contains(header.TCPFlagFin) {
			fin = o.tcp()
		}
	}
	if n := tcpFlows(h.st); n != 1 {
		t.Fatalf("%d flows before the FIN is acknowledged, want 1", n)
	}
	h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: fin.SequenceNumber() + 1}.bytes())
	h.settle(t)
	if n := tcpFlows(h.st); n != 0 {
		t.Fatalf("%d flows left after both FINs", n)
	}
}

func tcpFlows(st *Stack) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.tcp)
}

// Data and the host's EOF both waiting before the relay reads: a short
// read must not be taken for "nothing more to come", or the FIN (which
// signals no new readiness) would never be passed on.
func TestTCPRelayDataThenEOFAlreadyQueued(t *testing.T) {
	h := newHarness(t)
	src, dst := netip.AddrPortFrom(jail4, 43800), netip.MustParseAddrPort("203.0.113.28:80")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	d := h.dialer.next(t)
	synack := readOut(t, h.ep)
	// The server's greeting and its close are queued before the
	// handshake completes (the relay starts reading only then).
	if _, err := d.peer.Write([]byte("220 bye")); err != nil {
		t.Fatal(err)
	}
	d.peer.Close()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: synack.tcp().SequenceNumber() + 1}.bytes())
	var got []byte
	for {
		o := readOut(t, h.ep)
		got = append(got, o.tcpPayload()...)
		if o.tcp().Flags().Contains(header.TCPFlagFin) {
			break
		}
	}
	if string(got) != "220 bye" {
		t.Fatalf("sandbox got %q before the FIN", got)
	}
}

// flowOf returns the relay's flow for c.
func (c *conn) flow(t *testing.T) *tcpFlow {
	t.Helper()
	c.h.st.mu.Lock()
	defer c.h.st.mu.Unlock()
	f := c.h.st.tcp[flowKey{src: c.src, dst: c.dst}]
	if f == nil {
		t.Fatal("no flow")
	}
	return f
}

// A sandbox that stops reading but answers every window probe keeps its
// connection, however long it waits (Linux's persist timer never gives up
// on a peer that answers either).
func TestTCPRelayZeroWindowNeverGivesUpOnAnAnsweringPeer(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 43900), netip.MustParseAddrPort("203.0.113.29:80"))
	h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1, zeroWnd: true}.bytes())
	go c.d.peer.Write([]byte("data"))
	f := c.flow(t)
	for i := 0; i < 2*tcpMaxRetries; i++ {
		// The probe timer running out (without waiting for it) ...
		f.mu.Lock()
		f.rtoFrom = time.Now().Add(-time.Hour)
		f.mu.Unlock()
		f.onRTO()
		o := readOut(t, h.ep)
		if fl := o.tcp().Flags(); fl.Contains(header.TCPFlagRst) || len(o.tcpPayload()) != 0 {
			t.Fatalf("round %d: got %v with %d bytes, want a window probe", i, fl, len(o.tcpPayload()))
		}
		// ... and the sandbox answering it, window still closed.
		h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1, zeroWnd: true}.bytes())
	}
	c.openWindow(t, "data")
}

// Many small segments waiting for a full host socket share buffers: their
// count does not multiply the memory they take.
func TestTCPRelaySmallSegmentsShareBuffers(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 44000), netip.MustParseAddrPort("203.0.113.30:80"))
	// Fill the host socket (the host does not read), then trickle.
	big := pattern(4 << 20)
	for off := 0; off < 1<<20; off += 32 << 10 {
		c.seg(header.TCPFlagAck, big[off:off+32<<10])
	}
	const small = 5000
	for i := 0; i < small; i++ {
		c.seg(header.TCPFlagAck, []byte{byte(i)})
	}
	f := c.flow(t)
	f.mu.Lock()
	entries, pending := len(f.pend), f.pendLen
	f.mu.Unlock()
	if pending < small || entries > pending/tcpPendChunk+2 {
		t.Fatalf("%d bytes pending in %d buffers, want at most %d buffers", pending, entries, pending/tcpPendChunk+2)
	}
}

// Connections still opening (dialing, or waiting for the handshake's
// ACK) are capped: a SYN flood cannot hold more host sockets than that.
func TestTCPRelayCapsOpeningConnections(t *testing.T) {
	h := newHarness(t)
	h.st.cfg.MaxInFlight = 2
	dst := netip.MustParseAddrPort("203.0.113.31:80")
	syn := func(port uint16) {
		h.send(tcpSeg{src: netip.AddrPortFrom(jail4, port), dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	}
	syn(44100)
	d1 := h.dialer.next(t)
	syn(44101)
	h.dialer.next(t)
	for range 2 {
		readOut(t, h.ep) // the SYN-ACKs
	}
	syn(44102)
	h.dialer.none(t) // over the cap: dropped, the sandbox retries
	// One handshake completes: room for one more.
	f := (&conn{h: h, src: netip.AddrPortFrom(jail4, 44100), dst: dst}).flow(t)
	f.mu.Lock()
	iss := uint32(f.iss)
	f.mu.Unlock()
	h.send(tcpSeg{src: netip.AddrPortFrom(jail4, 44100), dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
	syn(44102)
	if d := h.dialer.next(t); d.address != dst.String() {
		t.Fatalf("dialed %s", d.address)
	}
	d1.peer.Close()
}

// A SYN on a live flow (a spoofed or confused sandbox) gets a challenge
// ACK and changes nothing: the flow keeps relaying.
func TestTCPRelaySYNOnLiveFlowGetsChallengeAck(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 44200), netip.MustParseAddrPort("203.0.113.32:80"))
	h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagSyn, seq: 777}.bytes())
	a := readOut(t, h.ep).tcp()
	if a.Flags() != header.TCPFlagAck || a.AckNumber() != c.nxt {
		t.Fatalf("got %v ack %d, want a bare ACK of %d", a.Flags(), a.AckNumber(), c.nxt)
	}
	h.dialer.none(t)
	c.seg(header.TCPFlagAck, []byte("still"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c.d.peer, got); err != nil || string(got) != "still" {
		t.Fatalf("host got %q, %v", got, err)
	}
}

// A sandbox that never completes its handshake gets SYN-ACKs a bounded
// number of times; then the flow is reset and its host socket closed.
func TestTCPRelayGivesUpOnAHalfOpenHandshake(t *testing.T) {
	h := newHarness(t)
	src, dst := netip.AddrPortFrom(jail4, 44300), netip.MustParseAddrPort("203.0.113.33:80")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	d := h.dialer.next(t)
	readOut(t, h.ep) // the SYN-ACK
	f := (&conn{h: h, src: src, dst: dst}).flow(t)
	for i := 0; ; i++ {
		if i > tcpSynRetries+1 {
			t.Fatalf("still retrying after %d timeouts", i)
		}
		f.mu.Lock()
		f.rtoFrom = time.Now().Add(-time.Hour)
		f.mu.Unlock()
		f.onRTO()
		if fl := readOut(t, h.ep).tcp().Flags(); fl.Contains(header.TCPFlagRst) {
			break
		} else if fl != header.TCPFlagSyn|header.TCPFlagAck {
			t.Fatalf("timeout %d sent %v, want a SYN-ACK again", i, fl)
		}
	}
	d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
	if _, err := d.peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("host socket after giving up: %v, want closed", err)
	}
	d.peer.Close()
	h.settle(t)
	if n := tcpFlows(h.st); n != 0 {
		t.Fatalf("%d flows left", n)
	}
}

// RFC 5961 3.2: a reset inside the window but not at exactly the next
// sequence number gets a challenge ACK (carrying that number) and leaves
// the flow up; the reset a genuine peer then sends, at that number, ends
// it.
func TestTCPRelayInexactResetGetsChallengeAck(t *testing.T) {
	h := newHarness(t)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 44400), netip.MustParseAddrPort("203.0.113.34:80"))
	c.at(c.nxt+1000, header.TCPFlagRst, nil)
	a := readOut(t, h.ep).tcp()
	if a.Flags() != header.TCPFlagAck || a.AckNumber() != c.nxt {
		t.Fatalf("got %v ack %d, want a challenge ACK of %d", a.Flags(), a.AckNumber(), c.nxt)
	}
	c.seg(header.TCPFlagAck, []byte("alive"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c.d.peer, got); err != nil || string(got) != "alive" {
		t.Fatalf("after an inexact reset the host got %q, %v", got, err)
	}
	c.at(c.nxt, header.TCPFlagRst, nil)
	c.d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
	if n, err := c.d.peer.Read(got); err != io.EOF {
		t.Fatalf("after the exact reset the host read %d bytes, %v; want EOF", n, err)
	}
	c.d.peer.Close()
	h.settle(t)
}

// A flow's flags and state print by name, for logs and test failures.
func TestTCPFlowFlagsString(t *testing.T) {
	for _, tt := range []struct {
		fl   flowFlags
		want string
	}{
		{0, "-"},
		{finFromSandbox, "FIN_FROM_SANDBOX"},
		{finToHost | eofFromHost | finToSandbox, "FIN_TO_HOST|EOF_FROM_HOST|FIN_TO_SANDBOX"},
		{tornDown | 1<<15, "TORN_DOWN|0x8000"},
	} {
		if got := tt.fl.String(); got != tt.want {
			t.Errorf("%#x: %q, want %q", uint16(tt.fl), got, tt.want)
		}
	}
	if got := tcpEstablished.String(); got != "ESTABLISHED" {
		t.Errorf("tcpEstablished: %q", got)
	}
	if len(flowFlagNames) != bits.Len16(uint16(tornDown)) {
		t.Errorf("%d flag names for %d flags", len(flowFlagNames), bits.Len16(uint16(tornDown)))
	}
}
