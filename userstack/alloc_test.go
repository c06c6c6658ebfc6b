package userstack

import (
	"io"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The relay's hot path allocates nothing per packet, the memory budget's
// accounting and the header checks included: an in-order data segment from
// the sandbox, through the TUN's fast path, written to the host socket
// (and its delayed ACK).
func TestRelayHotPathsAllocateNothing(t *testing.T) {
	z := newTUNFuzz(t)
	z.st.memBudget = DefaultMaxRelayMemory // not the fuzz target's tiny one: no pressure here
	src, dst := netip.AddrPortFrom(jail4, 40700), netip.MustParseAddrPort("203.0.113.90:8080")
	seq := uint32(1001)
	z.input(synWithOptions(src, dst, 1000))
	z.quiesce()
	_, ack := tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: seq, ack: fuzzISS + 1}.bytes()
	z.input(ack)
	z.drain(t)
	z.dialer.mu.Lock()
	peer := z.dialer.peers[0]
	z.dialer.mu.Unlock()
	payload := pattern(1000)
	segs := make([][]byte, 0, 200)
	for i := range 200 {
		_, b := tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: seq + uint32(i*len(payload)), ack: fuzzISS + 1, payload: payload}.bytes()
		segs = append(segs, b)
	}
	buf := make([]byte, len(payload))
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		z.input(segs[i])
		i++
		if _, err := io.ReadFull(peer, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per data segment from the sandbox, want 0", allocs)
	}
}
