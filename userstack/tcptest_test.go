package userstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// tcptest: a harness for the relay in the manner of gVisor's TCP testing
// context. The test plays the sandbox's kernel, segment by segment, over
// the channel endpoint, and the remote end through the fake dialer's
// socket. Both initial sequence numbers are fixed (near 2^32, so that
// every test's data crosses the wrap), and the retransmission timer
// measures time by a fake clock the test moves (advance): a timeout
// happens when the test says so, never by waiting.
//
// What the relay sends in answer to a segment it sends before the call
// that injected the segment returns (the channel endpoint delivers on the
// caller's goroutine); what it sends for the host socket or a timer comes
// from the event loop. barrier uses the first: an ACK for no connection is
// answered at once with a RST that carries a marker, so "the next packet
// is that RST" proves nothing else was sent before it.

const (
	ttRelayISS   = seqnum.Value(0xffff_fff0) // the relay's ISS
	ttSandboxISS = seqnum.Value(0xffff_ffe0) // the sandbox's
)

var ttDst = netip.MustParseAddrPort("203.0.113.80:443")

// tcpTest is one relayed flow under test, with the sandbox's view of it.
type tcpTest struct {
	t     *testing.T
	h     *harness
	clock *fakeClock // the relay's retransmission clock
	src   netip.AddrPort
	peer  net.Conn // the remote end's socket

	nxt  seqnum.Value // the sandbox's next sequence number
	rcvd seqnum.Value // what the sandbox acknowledges of the relay's
	wnd  uint16       // the window field the sandbox sends

	barriers uint32
}

// newTCPTest starts a stack with the seams set, no flow yet.
func newTCPTest(t *testing.T, dialer Dialer) *tcpTest {
	t.Helper()
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	relayClock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	if dialer == nil {
		dialer = h.dialer
	}
	h.start(t, Config{
		Policy:     netpolicy.MustNew(netpolicy.Config{}),
		Dialer:     dialer,
		Gateways:   []netip.Addr{gateway4},
		VirtualDNS: []netip.Addr{dns4},
		Upstreams:  []netip.AddrPort{upstream},
		Now:        h.clock.now,
		tcpISS:     func() uint32 { return uint32(ttRelayISS) },
		tcpClock:   relayClock.now,
	})
	return &tcpTest{t: t, h: h, clock: relayClock, src: netip.AddrPortFrom(jail4, 45000), wnd: 0xffff}
}

// synOpts are the options of the sandbox's SYN.
type synOpts struct {
	mss    uint16 // 0: none
	ws     int    // -1: none
	sackOK bool
	ts     bool
}

// encode returns the options, padded with NOPs to a whole word.
func (o synOpts) encode() []byte {
	b := make([]byte, 40)
	n := 0
	if o.mss != 0 {
		n += header.EncodeMSSOption(uint32(o.mss), b[n:])
	}
	if o.ws >= 0 {
		n += header.EncodeNOP(b[n:])
		n += header.EncodeWSOption(o.ws, b[n:])
	}
	if o.sackOK {
		n += header.EncodeNOP(b[n:])
		n += header.EncodeNOP(b[n:])
		n += header.EncodeSACKPermittedOption(b[n:])
	}
	if o.ts {
		n += header.EncodeNOP(b[n:])
		n += header.EncodeNOP(b[n:])
		n += header.EncodeTSOption(1000, 0, b[n:])
	}
	for n%4 != 0 {
		n += header.EncodeNOP(b[n:])
	}
	return b[:n]
}

// tsOption is a timestamp option (with its NOPs), as on every segment of
// a connection that negotiated them.
func tsOption(val, ecr uint32) []byte {
	b := make([]byte, 12)
	n := header.EncodeNOP(b)
	n += header.EncodeNOP(b[n:])
	header.EncodeTSOption(val, ecr, b[n:])
	return b
}

// sackOption is a SACK option (with its NOPs) carrying blocks.
func sackOption(blocks ...header.SACKBlock) []byte {
	b := make([]byte, 40)
	n := header.EncodeNOP(b)
	n += header.EncodeNOP(b[n:])
	n += header.EncodeSACKBlocks(blocks, b[n:])
	return b[:n]
}

// sbSeg is a segment from the sandbox.
type sbSeg struct {
	flags    header.TCPFlags
	seq, ack seqnum.Value
	wnd      uint16
	opts     []byte // a whole number of words
	data     []byte
}

func (c *tcpTest) send(s sbSeg) {
	c.t.Helper()
	tcpLen := header.TCPMinimumSize + len(s.opts)
	b := make([]byte, tcpLen+len(s.data))
	h := header.TCP(b)
	h.Encode(&header.TCPFields{
		SrcPort: c.src.Port(), DstPort: ttDst.Port(), SeqNum: uint32(s.seq), AckNum: uint32(s.ack),
		DataOffset: uint8(tcpLen), Flags: s.flags, WindowSize: s.wnd,
	})
	copy(b[header.TCPMinimumSize:], s.opts)
	copy(b[tcpLen:], s.data)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, tcpAddr(c.src.Addr()), tcpAddr(ttDst.Addr()), uint16(len(b)))
	xsum = checksum.Checksum(s.data, xsum)
	h.SetChecksum(^h.CalculateChecksum(xsum))
	c.h.send(ipPacket(c.src.Addr(), ttDst.Addr(), header.TCPProtocolNumber, b))
}

// syn sends the sandbox's SYN; the flow's dial follows.
func (c *tcpTest) syn(o synOpts) {
	c.send(sbSeg{flags: header.TCPFlagSyn, seq: ttSandboxISS, wnd: c.wnd, opts: o.encode()})
	c.nxt = ttSandboxISS.Add(1)
}

// connect opens the flow: SYN with o, the dial, the SYN-ACK (checked and
// returned), and the handshake's ACK with window wnd.
func (c *tcpTest) connect(o synOpts, wnd uint16) header.TCP {
	c.t.Helper()
	c.syn(o)
	c.peer = c.h.dialer.next(c.t).peer
	synack := c.expect(flagsAre(header.TCPFlagSyn|header.TCPFlagAck), seqIs(ttRelayISS), ackIs(ttSandboxISS.Add(1)))
	c.rcvd = ttRelayISS.Add(1)
	c.wnd = wnd
	c.ack()
	return synack.tcp()
}

// ack sends a bare ACK of everything received, at the sandbox's next
// sequence number, with its window.
func (c *tcpTest) ack() { c.send(sbSeg{flags: header.TCPFlagAck, seq: c.nxt, ack: c.rcvd, wnd: c.wnd}) }

// data sends p (with flags besides ACK) at the sandbox's next sequence
// number and advances it.
func (c *tcpTest) data(p []byte, flags header.TCPFlags) {
	c.send(sbSeg{flags: header.TCPFlagAck | flags, seq: c.nxt, ack: c.rcvd, wnd: c.wnd, data: p})
	c.nxt = c.nxt.Add(seqnum.Size(len(p)))
	if flags&(header.TCPFlagFin|header.TCPFlagSyn) != 0 {
		c.nxt = c.nxt.Add(1)
	}
}

// segCheck checks a segment the relay sent; it returns what is wrong, or
// "".
type segCheck func(h header.TCP, payload []byte) string

func flagsAre(f header.TCPFlags) segCheck {
	return func(h header.TCP, _ []byte) string {
		if h.Flags() != f {
			return fmt.Sprintf("flags %v, want %v", h.Flags(), f)
		}
		return ""
	}
}

func seqIs(v seqnum.Value) segCheck {
	return func(h header.TCP, _ []byte) string {
		if got := seqnum.Value(h.SequenceNumber()); got != v {
			return fmt.Sprintf("seq %#x, want %#x", uint32(got), uint32(v))
		}
		return ""
	}
}

func ackIs(v seqnum.Value) segCheck {
	return func(h header.TCP, _ []byte) string {
		if got := seqnum.Value(h.AckNumber()); got != v {
			return fmt.Sprintf("ack %#x, want %#x", uint32(got), uint32(v))
		}
		return ""
	}
}

func wndIs(w uint16) segCheck {
	return func(h header.TCP, _ []byte) string {
		if h.WindowSize() != w {
			return fmt.Sprintf("window field %d, want %d", h.WindowSize(), w)
		}
		return ""
	}
}

func payloadIs(p []byte) segCheck {
	return func(_ header.TCP, got []byte) string {
		if string(got) != string(p) {
			return fmt.Sprintf("payload %d bytes %.20q, want %d bytes %.20q", len(got), got, len(p), p)
		}
		return ""
	}
}

// expect reads the next packet the relay sends: a TCP segment from the
// destination to the sandbox, passing every check.
func (c *tcpTest) expect(checks ...segCheck) out {
	c.t.Helper()
	o := readOut(c.t, c.h.ep)
	if o.proto != header.TCPProtocolNumber || o.src != ttDst.Addr() || o.dst != c.src.Addr() ||
		o.tcp().SourcePort() != ttDst.Port() || o.tcp().DestinationPort() != c.src.Port() {
		c.t.Fatalf("got protocol %d %v -> %v, want TCP from %v to %v (flow %s)", o.proto, o.src, o.dst, ttDst, c.src, c.describe())
	}
	var bad []string
	for _, check := range checks {
		if s := check(o.tcp(), o.tcpPayload()); s != "" {
			bad = append(bad, s)
		}
	}
	if len(bad) > 0 {
		c.t.Fatalf("the relay sent %v seq %#x ack %#x wnd %d (%d bytes): %s (flow %s)",
			o.tcp().Flags(), o.tcp().SequenceNumber(), o.tcp().AckNumber(), o.tcp().WindowSize(), len(o.tcpPayload()),
			strings.Join(bad, "; "), c.describe())
	}
	return o
}

// expectData reads data segments (no other flags than ACK and PSH, each
// acknowledging what the sandbox sent) until p has come, in order from
// the sandbox's rcvd on, in segments of at most mss bytes; it does not
// acknowledge them.
func (c *tcpTest) expectData(p []byte, mss int) {
	c.t.Helper()
	at := c.rcvd
	for len(p) > 0 {
		o := c.expect(seqIs(at), ackIs(c.nxt))
		got := o.tcpPayload()
		if f := o.tcp().Flags() &^ header.TCPFlagPsh; f != header.TCPFlagAck || len(got) == 0 || len(got) > mss || len(got) > len(p) {
			c.t.Fatalf("got %v with %d bytes, want data (at most %d bytes, %d to come)", o.tcp().Flags(), len(got), mss, len(p))
		}
		if string(got) != string(p[:len(got)]) {
			c.t.Fatalf("got different bytes at %#x", uint32(at))
		}
		p = p[len(got):]
		at = at.Add(seqnum.Size(len(got)))
	}
}

// checkNoPacket fails if the relay sends anything within d. It is a
// check, not a proof (what would come later passes unseen): barrier
// proves more where it applies.
func (c *tcpTest) checkNoPacket(d time.Duration, why string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if pkt := c.h.ep.ReadContext(ctx); pkt != nil {
		v := pkt.ToView()
		o := parseOut(c.t, append([]byte(nil), v.AsSlice()...))
		v.Release()
		pkt.DecRef()
		c.t.Fatalf("%s: the relay sent %v (%d bytes), want nothing (flow %s)", why, o.tcp().Flags(), len(o.tcpPayload()), c.describe())
	}
}

// barrier checks that the relay sent nothing before now (beyond what
// its timers and event loop have yet to send): it sends an ACK for a
// connection that does not exist (from the next port), which the relay
// resets at once with the ACK's number as the RST's sequence number, a
// marker nothing else carries; it fails unless the next packet is that
// RST.
func (c *tcpTest) barrier(why string) {
	c.t.Helper()
	c.barriers++
	marker := seqnum.Value(0xba55_0000 + c.barriers)
	other := netip.AddrPortFrom(c.src.Addr(), c.src.Port()+1)
	c.h.send(tcpSeg{src: other, dst: ttDst, flags: header.TCPFlagAck, seq: 1, ack: uint32(marker)}.bytes())
	o := readOut(c.t, c.h.ep)
	if o.proto != header.TCPProtocolNumber || o.tcp().DestinationPort() != other.Port() ||
		o.tcp().Flags() != header.TCPFlagRst || seqnum.Value(o.tcp().SequenceNumber()) != marker {
		c.t.Fatalf("%s: the relay sent %v to port %d seq %#x ack %#x (%d bytes) before the barrier's RST (flow %s)",
			why, o.tcp().Flags(), o.tcp().DestinationPort(), o.tcp().SequenceNumber(), o.tcp().AckNumber(), len(o.tcpPayload()), c.describe())
	}
}

// flow returns the relay's flow, or nil once it is gone.
func (c *tcpTest) flow() *tcpFlow {
	c.h.st.mu.Lock()
	defer c.h.st.mu.Unlock()
	return c.h.st.tcp[flowKey{src: c.src, dst: ttDst}]
}

// describe is the flow's String, for failures.
func (c *tcpTest) describe() string {
	f := c.flow()
	if f == nil {
		return "gone"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.String()
}

// rto returns the flow's current retransmission timeout.
func (c *tcpTest) rto() time.Duration {
	f := c.flow()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rto
}

// advance moves the relay's clock by d and runs the retransmission timer
// as the event loop would when it runs out: it acts only if, by the
// clock, its time has come.
func (c *tcpTest) advance(d time.Duration) {
	c.clock.add(d)
	if f := c.flow(); f != nil {
		f.timerFired(&f.rtoTimer)
	}
}

// gone waits (boundedly) until the flow has left the table.
func (c *tcpTest) gone(why string) {
	c.t.Helper()
	for i := 0; c.flow() != nil; i++ {
		if i == 4000 { // failsafe, not a timing assertion
			c.t.Fatalf("%s: the flow is still there: %s", why, c.describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostWrite writes p as the remote end.
func (c *tcpTest) hostWrite(p []byte) {
	c.t.Helper()
	if _, err := c.peer.Write(p); err != nil {
		c.t.Fatalf("host write: %v", err)
	}
}

// hostGets reads exactly p as the remote end.
func (c *tcpTest) hostGets(p []byte) {
	c.t.Helper()
	_ = c.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
	got := make([]byte, len(p))
	if _, err := io.ReadFull(c.peer, got); err != nil || string(got) != string(p) {
		c.t.Fatalf("the host read %.20q, %v; want %.20q", got, err, p)
	}
}

// hostEnd reads the remote end's socket to its end (EOF, or a reset),
// failing on data.
func (c *tcpTest) hostEnd() {
	c.t.Helper()
	_ = c.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
	var b [64]byte
	n, err := c.peer.Read(b[:])
	if err == nil || (!errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset")) {
		c.t.Fatalf("the host read %q, %v; want its end", b[:n], err)
	}
}

var noSynOpts = synOpts{ws: -1}

// The SYN-ACK's options: the relay offers its MSS (the link's) and, only
// when the sandbox offered window scaling, its own scale; never SACK or
// timestamps (deliberately absent: see the theory of operation), whatever
// the sandbox offers, so the sandbox uses neither. A SYN's window is
// never scaled (RFC 7323 2.2).
func TestTCPSynAckOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    synOpts
		ws   int
	}{
		{"none", noSynOpts, -1},
		{"mss only", synOpts{mss: 1460, ws: -1}, -1},
		{"window scale", synOpts{mss: 1460, ws: 3}, tcpWndShift},
		{"window scale 0", synOpts{ws: 0}, tcpWndShift},
		{"everything", synOpts{mss: 1460, ws: 9, sackOK: true, ts: true}, tcpWndShift},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newTCPTest(t, nil)
			synack := c.connect(tt.o, 0xffff)
			opts := header.ParseSynOptions(synack.Options(), true)
			if want := c.h.st.maxSegment(false); int(opts.MSS) != want {
				t.Errorf("MSS %d, want the link's %d", opts.MSS, want)
			}
			if opts.WS != tt.ws {
				t.Errorf("window scale %d, want %d", opts.WS, tt.ws)
			}
			if opts.SACKPermitted || opts.TS {
				t.Errorf("SACK-permitted %v, timestamps %v; want neither", opts.SACKPermitted, opts.TS)
			}
			if synack.WindowSize() != 0xffff {
				t.Errorf("SYN-ACK window %d, want 65535 (unscaled, capped)", synack.WindowSize())
			}
			c.barrier("after the handshake")
		})
	}
}

// Scaled windows (gVisor's TestScaledWindowConnect, TestNonScaledWindow*,
// TestScaledSendWindow). The relay's window: with scaling, its window
// field is its buffer shifted by its scale; without, 65535. The
// sandbox's: the relay applies the sandbox's scale (at most 14, RFC 7323
// 2.3) to every window after the SYN's and sends no byte past it.
func TestTCPScaledWindows(t *testing.T) {
	t.Run("relay's window scaled", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.connect(synOpts{mss: 1460, ws: 3}, 0xffff)
		c.data([]byte("x"), header.TCPFlagPsh)
		c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt), wndIs(tcpRcvBuf>>tcpWndShift)) // the delayed ACK
	})
	t.Run("relay's window unscaled", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.connect(synOpts{mss: 1460, ws: -1}, 0xffff)
		c.data([]byte("x"), header.TCPFlagPsh)
		c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt), wndIs(0xffff))
	})
	for scale := 0; scale <= 15; scale++ {
		t.Run(fmt.Sprintf("sandbox's window scale %d", scale), func(t *testing.T) {
			c := newTCPTest(t, nil)
			// Window field 1: a window of 1<<scale bytes.
			c.connect(synOpts{mss: 60000, ws: scale}, 1)
			wnd := 1 << min(scale, 14)
			p := pattern(20000)
			c.hostWrite(p)
			c.expectData(p[:min(wnd, len(p))], 60000)
			c.barrier("past the sandbox's window")
		})
	}
	t.Run("without scaling the sandbox's window is not shifted", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.connect(synOpts{mss: 1000, ws: -1}, 700)
		p := pattern(2000)
		c.hostWrite(p)
		c.expectData(p[:700], 1000)
		c.barrier("past the sandbox's window")
	})
}

// The sandbox's MSS bounds each segment; the relay's data crosses the
// sequence space's wrap (its ISS is just below 2^32).
func TestTCPSandboxMSS(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(synOpts{mss: 100, ws: -1}, 0xffff)
	p := pattern(250)
	c.hostWrite(p)
	c.expectData(p, 100)
	c.rcvd = c.rcvd.Add(250)
	c.ack()
	c.barrier("after the data is acknowledged")
}

// FIN retransmission (gVisor's TestFinRetransmit): the host's FIN, not
// acknowledged, is sent again when the timer runs out; the sandbox's ACK
// of it and its own FIN end the flow, with the sandbox's FIN passed on.
func TestTCPFinRetransmit(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.peer.(interface{ CloseWrite() error }).CloseWrite()
	fin := []segCheck{flagsAre(header.TCPFlagAck | header.TCPFlagFin), seqIs(ttRelayISS.Add(1)), ackIs(c.nxt)}
	c.expect(fin...)
	c.advance(c.rto() - time.Millisecond)
	c.barrier("before the timeout")
	c.advance(time.Millisecond)
	c.expect(fin...)
	c.advance(c.rto())
	c.expect(fin...) // backed off, and again
	c.rcvd = ttRelayISS.Add(2)
	c.data(nil, header.TCPFlagFin)
	c.expect(flagsAre(header.TCPFlagAck), seqIs(ttRelayISS.Add(2)), ackIs(c.nxt))
	c.hostEnd()
	c.gone("after both FINs")
}

// The retransmission timer gives up after tcpMaxRetries timeouts in a
// row (gVisor's TestMaxRetransmitsTimeout): each sends the data again,
// the timeout doubling; then the sandbox gets a RST and the host socket
// closes.
func TestTCPMaxRetransmits(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.hostWrite([]byte("abc"))
	data := []segCheck{flagsAre(header.TCPFlagAck | header.TCPFlagPsh), seqIs(ttRelayISS.Add(1)), payloadIs([]byte("abc"))}
	c.expect(data...)
	want := tcpRTOMin
	for i := 0; i < tcpMaxRetries; i++ {
		if got := c.rto(); got != want {
			t.Fatalf("timeout %d: %v, want %v", i, got, want)
		}
		c.advance(want)
		c.expect(data...)
		want = min(2*want, tcpRTOMax)
	}
	c.advance(want)
	c.expect(flagsAre(header.TCPFlagAck|header.TCPFlagRst), seqIs(ttRelayISS.Add(4)))
	c.hostEnd()
	c.gone("after giving up")
}

// Zero window probing (gVisor's TestZeroWindowSend). The relay's probe
// is a bare ACK one below sndUna (out of window on purpose, as Linux's),
// not gVisor's probe of one byte: the relay then holds no byte the window
// has not room for. Probes back off like retransmissions, and go on for
// as long as the sandbox answers them.
func TestTCPZeroWindowProbing(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0)
	c.hostWrite([]byte("abc"))
	probe := []segCheck{flagsAre(header.TCPFlagAck), seqIs(ttRelayISS), ackIs(c.nxt), payloadIs(nil)}
	want := tcpRTOMin
	for i := 0; i < tcpMaxRetries+2; i++ {
		rto := c.rto()
		if rto != want {
			t.Fatalf("probe %d after %v, want %v", i, rto, want)
		}
		want = min(2*want, tcpRTOMax)
		c.advance(rto - time.Millisecond)
		c.barrier("before the probe is due")
		c.advance(time.Millisecond)
		c.expect(probe...)
		c.ack() // still zero
	}
	c.wnd = 2
	c.ack()
	c.expectData([]byte("ab"), 536)
	c.rcvd = c.rcvd.Add(2)
	c.ack()
	c.expectData([]byte("c"), 536)
}

// Segments outside the window, or past a gap, are not taken: each gets
// a duplicate ACK at once and nothing reaches the host (the relay keeps
// nothing out of order, deliberately: the sandbox's fast retransmit fills
// the gap). An entirely old one is acknowledged and not delivered twice.
func TestTCPOutOfWindowSegments(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	dup := []segCheck{flagsAre(header.TCPFlagAck), ackIs(c.nxt), payloadIs(nil)}
	for _, off := range []seqnum.Size{1 << 30, 1 << 31, tcpRcvBuf, 10} {
		c.send(sbSeg{flags: header.TCPFlagAck | header.TCPFlagPsh, seq: c.nxt.Add(off), ack: c.rcvd, wnd: c.wnd, data: []byte("future")})
		c.expect(dup...)
	}
	c.data([]byte("now"), header.TCPFlagPsh)
	c.hostGets([]byte("now"))
	c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt)) // the delayed ACK
	c.send(sbSeg{flags: header.TCPFlagAck | header.TCPFlagPsh, seq: c.nxt.Add(^seqnum.Size(2)), ack: c.rcvd, wnd: c.wnd, data: []byte("now")})
	c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt))
	c.data([]byte("next"), header.TCPFlagPsh)
	c.hostGets([]byte("next")) // "now" was not written twice
}

// RFC 9293 3.10.7.4: a segment acknowledging what the relay never sent
// gets an ACK and is dropped: its data does not reach the host.
func TestTCPAckOfUnsentDataDropsSegment(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.send(sbSeg{flags: header.TCPFlagAck | header.TCPFlagPsh, seq: c.nxt, ack: c.rcvd.Add(1000), wnd: c.wnd, data: []byte("bogus")})
	c.expect(flagsAre(header.TCPFlagAck), seqIs(c.rcvd), ackIs(c.nxt))
	c.data([]byte("real"), header.TCPFlagPsh)
	c.hostGets([]byte("real"))
}

// A keepalive (one below the next sequence number) is not a duplicate
// ACK: three of them while data is outstanding get three ACKs and no
// fast retransmit (an unacceptable segment is answered and dropped,
// RFC 9293 3.10.7.4, before its ACK is looked at).
func TestTCPKeepalivesAreNotDuplicateAcks(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.hostWrite([]byte("abc"))
	c.expect(flagsAre(header.TCPFlagAck|header.TCPFlagPsh), payloadIs([]byte("abc")))
	for range 3 {
		c.send(sbSeg{flags: header.TCPFlagAck, seq: c.nxt.Add(^seqnum.Size(0)), ack: c.rcvd, wnd: c.wnd})
		c.expect(flagsAre(header.TCPFlagAck), seqIs(c.rcvd.Add(3)), ackIs(c.nxt), payloadIs(nil))
	}
	c.barrier("after three keepalives")
	// Three real duplicate ACKs do retransmit.
	for range 3 {
		c.ack()
	}
	c.expect(flagsAre(header.TCPFlagAck|header.TCPFlagPsh), seqIs(c.rcvd), payloadIs([]byte("abc")))
}

// A reply carries the ACK of the request it answers, and the delayed
// ACK's timer stops with it: left armed, it woke the event loop a
// millisecond after each request for nothing (or, with the next request
// already waiting for its reply, sent that request's ACK bare before the
// reply could carry it).
func TestTCPReplyStopsDelayedAck(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	for i := range 3 {
		c.data([]byte{'q', byte('0' + i)}, header.TCPFlagPsh)
		c.hostGets([]byte{'q', byte('0' + i)})
		c.hostWrite([]byte{'r', byte('0' + i)})
		c.expect(flagsAre(header.TCPFlagAck|header.TCPFlagPsh), ackIs(c.nxt), payloadIs([]byte{'r', byte('0' + i)}))
		c.rcvd = c.rcvd.Add(2)
		f := c.flow()
		f.mu.Lock()
		armed := f.has(ackTimerArmed)
		f.mu.Unlock()
		p := c.h.st.poll
		p.mu.Lock()
		queued := f.ackTimer.idx >= 0
		p.mu.Unlock()
		if armed || queued {
			t.Fatalf("round trip %d: the reply carried the ACK, but the delayed ACK is still armed (flag %v, timer queued %v)", i, armed, queued)
		}
	}
	c.barrier("after three round trips: no bare ACK")
}

// A bare segment past the relay's window still counts for its ACK (the
// relay's window can shrink under memory pressure, and a sender's ACKs
// from beyond the new edge must not be lost; RFC 9293 would drop it): it
// gets a duplicate ACK, and the data it acknowledges is not sent again.
func TestTCPAckBeyondWindowCounts(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.hostWrite([]byte("abc"))
	c.expect(flagsAre(header.TCPFlagAck|header.TCPFlagPsh), payloadIs([]byte("abc")))
	c.send(sbSeg{flags: header.TCPFlagAck, seq: c.nxt.Add(tcpRcvBuf + 1000), ack: c.rcvd.Add(3), wnd: c.wnd})
	c.expect(flagsAre(header.TCPFlagAck), seqIs(c.rcvd.Add(3)), ackIs(c.nxt))
	c.advance(tcpRTOMax)
	c.barrier("after the timeout: nothing was outstanding")
}

// The window guard (SND.WL1) cannot be held still by a segment from far
// ahead: an ACK of new data updates the window whatever its sequence
// number, as Linux does (RFC 9293 alone would ignore it here).
func TestTCPWindowFollowsNewAcks(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.hostWrite([]byte("abc"))
	c.expect(flagsAre(header.TCPFlagAck|header.TCPFlagPsh), payloadIs([]byte("abc")))
	c.send(sbSeg{flags: header.TCPFlagAck, seq: c.nxt.Add(1 << 30), ack: c.rcvd, wnd: 0xffff})
	c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt)) // a gap: duplicate ACK
	c.rcvd, c.wnd = c.rcvd.Add(3), 3
	c.ack()
	c.hostWrite([]byte("defghij"))
	c.expectData([]byte("def"), 536)
	c.barrier("past the window of 3")
}

// Data after the sandbox's FIN is not taken: the FIN ended the sandbox's
// stream (RFC 9293 3.10.7.4, eighth), so it gets an ACK of the FIN and
// nothing reaches the host after its end. A retransmitted FIN gets the
// same ACK.
func TestTCPDataAfterFin(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	c.data([]byte("hi"), header.TCPFlagFin|header.TCPFlagPsh)
	c.hostGets([]byte("hi"))
	c.hostEnd()
	c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt)) // the FIN's, delayed
	c.data([]byte("more"), header.TCPFlagPsh)
	c.expect(flagsAre(header.TCPFlagAck), ackIs(ttSandboxISS.Add(4)), payloadIs(nil))
	c.nxt = ttSandboxISS.Add(4) // "more" was not taken
	c.send(sbSeg{flags: header.TCPFlagAck | header.TCPFlagFin, seq: ttSandboxISS.Add(3), ack: c.rcvd, wnd: c.wnd})
	c.expect(flagsAre(header.TCPFlagAck), ackIs(ttSandboxISS.Add(4)), payloadIs(nil))
	// The host's side still works.
	c.hostWrite([]byte("reply"))
	c.expectData([]byte("reply"), 536)
}

// SACK blocks and timestamps on the sandbox's segments (which it would
// only send had the relay offered them) are ignored: data is taken, a
// SACK changes nothing.
func TestTCPIgnoresSackAndTimestamps(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(synOpts{ws: -1, sackOK: true, ts: true}, 0xffff)
	c.send(sbSeg{flags: header.TCPFlagAck | header.TCPFlagPsh, seq: c.nxt, ack: c.rcvd, wnd: c.wnd, opts: tsOption(2000, 0), data: []byte("stamped")})
	c.nxt = c.nxt.Add(7)
	c.hostGets([]byte("stamped"))
	c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt))
	c.hostWrite([]byte("abcdef"))
	c.expectData([]byte("abcdef"), 536)
	// A SACK of the last three bytes acknowledges nothing.
	c.send(sbSeg{flags: header.TCPFlagAck, seq: c.nxt, ack: c.rcvd, wnd: c.wnd,
		opts: sackOption(header.SACKBlock{Start: c.rcvd.Add(3), End: c.rcvd.Add(6)})})
	c.barrier("after a SACK")
	c.advance(c.rto())
	c.expectData([]byte("abcdef"), 536) // all of it again
}

// gatedDialer holds each dial until the test lets it go.
type gatedDialer struct {
	*fakeDialer
	gate chan struct{}
}

func (d gatedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	select {
	case <-d.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.fakeDialer.DialContext(ctx, network, address)
}

// RST in each state (gVisor's TestRSTOutOfWindowIsDropped,
// TestRSTInWindowNotExactSendsChallengeAck,
// TestRSTExactMatchAbortsConnection, and the states around them).
func TestTCPResetInEachState(t *testing.T) {
	rst := header.TCPFlagRst
	t.Run("dialing: any RST ends the flow", func(t *testing.T) {
		// The relay has answered nothing yet, so there is no sequence
		// number a reset could be checked against (it acts as a
		// listener would for a SYN it has queued); the dial's socket
		// is closed when the dial ends.
		gd := gatedDialer{newFakeDialer(), make(chan struct{})}
		c := newTCPTest(t, gd)
		c.syn(noSynOpts)
		c.send(sbSeg{flags: rst, seq: c.nxt.Add(12345)})
		close(gd.gate)
		c.peer = gd.next(t).peer
		c.hostEnd()
		c.gone("after the RST")
		c.checkNoPacket(50*time.Millisecond, "after a RST while dialing")
	})
	t.Run("SYN-RCVD: inexact gets a challenge ACK, exact ends it", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.syn(noSynOpts)
		c.peer = c.h.dialer.next(t).peer
		c.expect(flagsAre(header.TCPFlagSyn | header.TCPFlagAck))
		c.send(sbSeg{flags: rst, seq: c.nxt.Add(100)})
		c.expect(flagsAre(header.TCPFlagAck), seqIs(ttRelayISS.Add(1)), ackIs(c.nxt))
		c.send(sbSeg{flags: rst, seq: c.nxt})
		c.hostEnd()
		c.gone("after the exact RST")
	})
	t.Run("established: out of window dropped, inexact challenged, exact ends it", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.connect(noSynOpts, 0xffff)
		for _, off := range []seqnum.Size{1 << 30, 1 << 31, ^seqnum.Size(0)} {
			c.send(sbSeg{flags: rst, seq: c.nxt.Add(off)})
			c.barrier(fmt.Sprintf("RST at +%#x", uint32(off)))
		}
		c.send(sbSeg{flags: rst | header.TCPFlagAck, seq: c.nxt.Add(1024), ack: c.rcvd})
		c.expect(flagsAre(header.TCPFlagAck), seqIs(c.rcvd), ackIs(c.nxt))
		c.data([]byte("alive"), header.TCPFlagPsh)
		c.hostGets([]byte("alive"))
		c.send(sbSeg{flags: rst, seq: c.nxt})
		c.hostEnd()
		c.gone("after the exact RST")
	})
	t.Run("after the sandbox's FIN: the RST follows the FIN", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.connect(noSynOpts, 0xffff)
		c.data(nil, header.TCPFlagFin)
		c.hostEnd()
		c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt))
		c.send(sbSeg{flags: rst, seq: c.nxt.Add(^seqnum.Size(0))}) // at the FIN: old now
		c.barrier("RST at the FIN's number")
		c.send(sbSeg{flags: rst, seq: c.nxt})
		c.gone("after the exact RST")
	})
	t.Run("after the host's FIN", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.connect(noSynOpts, 0xffff)
		c.peer.(interface{ CloseWrite() error }).CloseWrite()
		c.expect(flagsAre(header.TCPFlagAck | header.TCPFlagFin))
		c.send(sbSeg{flags: rst, seq: c.nxt})
		c.gone("after the exact RST")
	})
	t.Run("no flow: a RST is not answered, anything else is reset", func(t *testing.T) {
		c := newTCPTest(t, nil)
		c.send(sbSeg{flags: rst, seq: 5})
		c.send(sbSeg{flags: header.TCPFlagAck, seq: 77, ack: 1234})
		c.expect(flagsAre(rst), seqIs(1234))
		c.send(sbSeg{flags: header.TCPFlagPsh, seq: 77, data: []byte("abc")})
		c.expect(flagsAre(rst|header.TCPFlagAck), seqIs(0), ackIs(80))
	})
	t.Run("after the end: a late FIN is reset (no TIME-WAIT)", func(t *testing.T) {
		// The relay keeps no TIME-WAIT: the flow is gone once both FINs
		// are acknowledged. The sandbox's FIN sent again (its ACK of our
		// FIN lost, say) is reset; its kernel, in LAST-ACK or CLOSING,
		// takes the RST as the end it was waiting for.
		c := newTCPTest(t, nil)
		c.connect(noSynOpts, 0xffff)
		c.peer.(interface{ CloseWrite() error }).CloseWrite()
		c.expect(flagsAre(header.TCPFlagAck | header.TCPFlagFin))
		c.rcvd = c.rcvd.Add(1)
		c.data(nil, header.TCPFlagFin)
		c.expect(flagsAre(header.TCPFlagAck), ackIs(c.nxt))
		c.gone("after both FINs")
		c.send(sbSeg{flags: header.TCPFlagAck | header.TCPFlagFin, seq: c.nxt.Add(^seqnum.Size(0)), ack: c.rcvd, wnd: c.wnd})
		c.expect(flagsAre(rst), seqIs(c.rcvd))
	})
}

// The relay's flows under concurrent use: the sandbox's segments from
// two goroutines at once (a channel endpoint allows it), the host writing
// and reading, the timers on the event loop. Run with -race: every field
// is touched under the flow's lock.
func TestTCPFlowConcurrentUse(t *testing.T) {
	c := newTCPTest(t, nil)
	c.connect(noSynOpts, 0xffff)
	done := make(chan struct{})
	keepalive := sbSeg{flags: header.TCPFlagAck, seq: c.nxt.Add(^seqnum.Size(0)), ack: c.rcvd, wnd: c.wnd}
	go func() {
		defer close(done)
		for range 200 {
			c.send(keepalive)
		}
	}()
	p := pattern(64 << 10)
	go c.peer.Write(p)
	for i := 0; i < 64; i++ {
		c.data(p[i<<10:(i+1)<<10], header.TCPFlagPsh)
	}
	c.hostGets(p)
	<-done
	c.checkStateOK()
}

// checkStateOK fails unless the flow's state is consistent.
func (c *tcpTest) checkStateOK() {
	c.t.Helper()
	f := c.flow()
	if f == nil {
		return
	}
	f.mu.Lock()
	err, desc := f.checkState(f.key), f.String()
	f.mu.Unlock()
	if err != "" {
		c.t.Fatalf("flow %s: %s", desc, err)
	}
}

// SYN-RCVD (gVisor's TestSYNRetransmit, TestSynRcvdBadSeqNumber): the
// sandbox's SYN sent again gets the SYN-ACK again; a SYN with another
// sequence number gets a challenge ACK; an ACK of anything but the
// SYN-ACK is dropped without an answer (RFC 9293 would answer it with a
// RST: the relay leaves the handshake to its SYN-ACK's retransmission,
// the sandbox being the only sender on the link); the right ACK then
// completes the handshake.
func TestTCPSynRcvd(t *testing.T) {
	c := newTCPTest(t, nil)
	c.syn(noSynOpts)
	c.peer = c.h.dialer.next(t).peer
	synack := []segCheck{flagsAre(header.TCPFlagSyn | header.TCPFlagAck), seqIs(ttRelayISS), ackIs(c.nxt)}
	c.expect(synack...)
	c.syn(noSynOpts)
	c.expect(synack...)
	c.send(sbSeg{flags: header.TCPFlagSyn, seq: ttSandboxISS.Add(500), wnd: c.wnd})
	c.expect(flagsAre(header.TCPFlagAck), seqIs(ttRelayISS.Add(1)), ackIs(c.nxt))
	c.send(sbSeg{flags: header.TCPFlagAck, seq: c.nxt, ack: ttRelayISS.Add(7), wnd: c.wnd})
	c.checkNoPacket(50*time.Millisecond, "after a wrong ACK in SYN-RCVD")
	c.rcvd = ttRelayISS.Add(1)
	c.ack()
	c.hostWrite([]byte("up"))
	c.expectData([]byte("up"), 536)
}

// The SYN-ACK is sent again when the timer runs out, tcpSynRetries
// times; then the flow is reset and its host socket closed.
func TestTCPSynAckRetransmit(t *testing.T) {
	c := newTCPTest(t, nil)
	c.syn(noSynOpts)
	c.peer = c.h.dialer.next(t).peer
	synack := []segCheck{flagsAre(header.TCPFlagSyn | header.TCPFlagAck), seqIs(ttRelayISS), ackIs(c.nxt)}
	c.expect(synack...)
	for range tcpSynRetries {
		c.advance(c.rto())
		c.expect(synack...)
	}
	c.advance(c.rto())
	c.expect(flagsAre(header.TCPFlagRst|header.TCPFlagAck), seqIs(ttRelayISS.Add(1)))
	c.hostEnd()
	c.gone("after giving up on the handshake")
}
