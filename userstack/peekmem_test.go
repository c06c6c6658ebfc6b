package userstack

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// A flow to a name that waits for memory while it is still peeking (no
// host socket yet: its ACKs advertised a short window) is woken when
// memory is given back like any other flow: it reopens its window and
// goes on peeking. It once read its host socket there, which it does not
// have yet (fd -1): EBADF, and the flow was reset (seen as a rare failure
// of TestNamesWatchPartialTake, whose dial races its data).
func TestNamesPeekingFlowWokenForMemory(t *testing.T) {
	const budget = 64 << 10
	h := newNamesHarnessWith(t, map[string][]uint16{"api.test": nil}, NameConfig{PeekTimeout: 10 * time.Second},
		func(c *Config) { c.MaxRelayMemory = budget })
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	src := netip.AddrPortFrom(jail4, 49960)
	dst := netip.AddrPortFrom(api, 443)
	iss := h.handshake(t, src, dst)

	// The relay's memory all but spent (by other flows): the ACK of the
	// first bytes of a ClientHello advertises a short window, and the
	// flow waits for memory.
	taken := h.st.memTake(budget - 100)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: []byte{0x16, 0x03, 0x01}}.bytes())
	for i := 0; !h.st.memWaiting.Load(); i++ {
		if i == 2000 {
			t.Fatal("the flow never waited for memory")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.st.memGive(taken)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if h.ep.NumQueued() == 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if o := readOut(t, h.ep); o.proto == header.TCPProtocolNumber && o.tcp().Flags().Contains(header.TCPFlagRst) {
			t.Fatal("the peeking flow was reset when memory came back")
		}
	}
	if n := tcpFlows(h.st); n != 1 {
		t.Fatalf("%d flows, want the peeking one still there", n)
	}
	hostGotNothing(t, h, h.zone.next(t))
}
