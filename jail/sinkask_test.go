package jail

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The SYN copies the sink keeps for the ask mode's re-delivery are
// bounded in bytes across the jail: SYNs carrying data up to the sink's
// MTU, held by every pending request the broker keeps, stay within
// maxSinkHeld; a datagram is never copied; a flow the broker does not
// keep gives its bytes back.
func TestSinkAskHeldBytesBounded(t *testing.T) {
	never := func(time.Duration, func()) func() bool { return func() bool { return true } }
	j := &Jail{ask: ask.New(ask.Config{Sandbox: "t", AfterFunc: never})}
	big := make([]byte, 64<<10) // a SYN with data, as large as the sink reads
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := 0
	for d := range 64 {
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(d), 1}), 80)
		for s := range 32 {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 2}), uint16(20000+d*32+s))
			if j.sinkAsk(nil, netpolicy.ProtoTCP, big, src, dst) {
				held++
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held < 64*32 {
		t.Fatalf("%d flows held, want %d (the test must fill the broker)", held, 64*32)
	}
	if n := j.sinkHeld.Load(); n > maxSinkHeld || n <= 0 {
		t.Errorf("sink holds %d bytes of SYN copies, want 1..%d", n, maxSinkHeld)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4*maxSinkHeld {
		t.Errorf("heap grew %d bytes holding %d SYNs of %d bytes, want at most %d", grew, held, len(big), 4*maxSinkHeld)
	}
	runtime.KeepAlive(j)

	// A flow held already (its retransmission) is not kept twice; a
	// datagram is not copied.
	k := &Jail{ask: ask.New(ask.Config{Sandbox: "t", AfterFunc: never})}
	src, dst := netip.MustParseAddrPort("192.0.2.2:30000"), netip.MustParseAddrPort("10.9.0.1:80")
	small := make([]byte, 60)
	for range 3 {
		k.sinkAsk(nil, netpolicy.ProtoTCP, small, src, dst)
	}
	if n := k.sinkHeld.Load(); n != int64(len(small)) {
		t.Errorf("one SYN held three times: %d bytes kept, want %d", n, len(small))
	}
	k.sinkAsk(nil, netpolicy.ProtoUDP, big, netip.MustParseAddrPort("192.0.2.2:30001"), netip.MustParseAddrPort("10.9.0.2:53"))
	if n := k.sinkHeld.Load(); n != int64(len(small)) {
		t.Errorf("after a datagram: %d bytes kept, want %d", n, len(small))
	}
}
