package userstack

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Issue 12: UDP flows are capped per sandbox. At the cap, a new flow
// evicts the least recently used one (by its last datagram either way,
// not by its age): the victim's host socket closes, the eviction is
// reported with its destination and a reason, the table never holds more
// than the cap, and the evicted flow's next datagram makes a new flow.
func TestUDPFlowCapEvictsLeastRecentlyUsed(t *testing.T) {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	var evicted blocks
	h.start(t, Config{
		Policy:      netpolicy.MustNew(netpolicy.Config{}),
		Dialer:      h.dialer,
		MaxUDPFlows: 3,
		OnEvict:     evicted.add,
		Now:         h.clock.now,
	})
	evicted.flush = h.st.flushBlocks // eviction records leave the loop through the block records' queue
	src := netip.AddrPortFrom(jail4, 46000)
	dst := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr("203.0.113.60"), uint16(6000+i))
	}
	buf := make([]byte, 64)
	read := func(d dial, want string) {
		t.Helper()
		_ = d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
		if n, err := d.peer.Read(buf); err != nil || string(buf[:n]) != want {
			t.Fatalf("host got %q, %v; want %q", buf[:n], err, want)
		}
	}
	closed := func(d dial) bool {
		_ = d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
		_, err := d.peer.Read(buf)
		return err == io.EOF
	}
	var peers []dial
	for i := range 3 {
		h.send(udpBytes(src, dst(i), []byte("hello")))
		d := h.dialer.next(t)
		read(d, "hello")
		peers = append(peers, d)
		h.clock.add(time.Second)
	}
	// Flow 0 is the oldest but the most recently used now.
	h.send(udpBytes(src, dst(0), []byte("again")))
	read(peers[0], "again")
	h.clock.add(time.Second)
	if got := evicted.list(); len(got) != 0 {
		t.Fatalf("evictions under the cap: %+v", got)
	}
	// A fourth flow evicts flow 1, the least recently used.
	h.send(udpBytes(src, dst(3), []byte("new")))
	read(h.dialer.next(t), "new")
	if !closed(peers[1]) {
		t.Fatal("the evicted flow's host socket is still open")
	}
	got := evicted.list()
	if len(got) != 1 || got[0].Dst != dst(1) || got[0].Proto != netpolicy.ProtoUDP || !strings.Contains(got[0].Rule, "udp flow cap 3") || got[0].Time != h.clock.now() {
		t.Fatalf("evictions %+v, want one of udp %v with the cap as its reason", got, dst(1))
	}
	if n := h.st.UDPFlows(); n != 3 {
		t.Fatalf("%d flows, want the cap, 3", n)
	}
	if len(h.blocks.list()) != 0 {
		t.Fatalf("an eviction was reported as a block: %+v", h.blocks.list())
	}
	// The survivors still relay; the evicted flow comes back as a new one
	// (evicting flow 2, now the least recently used).
	h.send(udpBytes(src, dst(0), []byte("still")))
	read(peers[0], "still")
	h.clock.add(time.Second)
	h.send(udpBytes(src, dst(1), []byte("back")))
	read(h.dialer.next(t), "back")
	if !closed(peers[2]) {
		t.Fatal("flow 2 was not evicted")
	}
	if got := evicted.list(); len(got) != 2 || got[1].Dst != dst(2) {
		t.Fatalf("evictions %+v, want flow 2 second", got)
	}
	for _, d := range peers {
		d.peer.Close()
	}
}

// A flood of new flows never holds more host sockets than the cap, and
// everything it evicted is released.
func TestUDPFlowCapUnderAFlood(t *testing.T) {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.dialer.calls = make(chan dial, 1000)
	var evicted blocks
	h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: h.dialer, MaxUDPFlows: 16, OnEvict: evicted.add, Now: h.clock.now})
	evicted.flush = h.st.flushBlocks
	const flows = 200
	for i := range flows {
		h.send(udpBytes(netip.AddrPortFrom(jail4, uint16(20000+i)), netip.MustParseAddrPort("203.0.113.61:7000"), []byte("x")))
		h.clock.add(time.Millisecond)
		if n := h.st.UDPFlows(); n > 16 {
			t.Fatalf("%d flows after %d datagrams, cap 16", n, i+1)
		}
	}
	if got := len(evicted.list()); got != flows-16 {
		t.Fatalf("%d evictions, want %d", got, flows-16)
	}
	for range flows {
		(<-h.dialer.calls).peer.Close()
	}
	h.settle(t)
	if regs := h.st.poll.registered(); regs > 16 {
		t.Fatalf("%d host sockets watched, cap 16", regs)
	}
}

// A flood of new UDP flows past the cap, each from a new source port:
// every datagram evicts a flow. Each eviction was reported to OnEvict at
// once, on the packet path, without bound (the jail writes each one to
// the --log-blocked file: seen, 3,000 lines for 3,000 datagrams in the
// same second, and a slow log file stalling the relay). Eviction
// records now take the block records' queue off the event loop, with a
// bucket of their own (a burst of evictBurst, then BlockRecordRate a
// second); the flows are evicted all the same, and counted exactly
// (UDPEvictions).
func TestUDPEvictionFloodIsRateLimited(t *testing.T) {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.dialer.calls = make(chan dial, evictBurst+2000)
	var evicted blocks
	h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: h.dialer, MaxUDPFlows: 16, OnEvict: evicted.add, Now: h.clock.now})
	evicted.flush = h.st.flushBlocks
	const flows = evictBurst + 2000 // in the same second of the stack's clock
	for i := range flows {
		h.send(udpBytes(netip.AddrPortFrom(jail4, uint16(20000+i)), netip.MustParseAddrPort("203.0.113.61:7000"), []byte("x")))
		if n := h.st.UDPFlows(); n > 16 {
			t.Fatalf("%d flows after %d datagrams, cap 16", n, i+1)
		}
	}
	got := len(evicted.list())
	t.Logf("%d evictions, %d reported", flows-16, got)
	if got > evictBurst {
		t.Fatalf("%d evictions reported in one second, want at most the eviction records' burst, %d", got, evictBurst)
	}
	if n := h.st.UDPEvictions(); n != flows-16 {
		t.Fatalf("%d evictions counted, want %d", n, flows-16)
	}
	if n := h.st.EvictRecordsDropped(); n != uint64(flows-16-got) {
		t.Fatalf("%d eviction records counted as dropped, want %d", n, flows-16-got)
	}
	if n := h.st.BlocksDropped(); n != 0 {
		t.Fatalf("%d block records dropped: evictions are no blocks", n)
	}
	for range flows {
		(<-h.dialer.calls).peer.Close()
	}
}

// unixPacketListener is a Dialer whose UDP mappings get an AF_UNIX
// datagram socket (sends to an internet address fail on it, harmlessly):
// the stack's bookkeeping of a mapping's destinations without a real
// network.
type unixPacketListener struct{ *fakeDialer }

func (unixPacketListener) ListenPacket(context.Context, string, string) (net.PacketConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	unix.Close(fds[1])
	f := os.NewFile(uintptr(fds[0]), "udp")
	defer f.Close()
	return net.FilePacketConn(f)
}

// udpPeersHeld counts the destinations and reply sources every mapping
// remembers.
func (st *Stack) udpPeersHeld() int {
	st.mu.Lock()
	flows := make([]*udpFlow, 0, len(st.flows))
	for _, f := range st.flows {
		flows = append(flows, f)
	}
	st.mu.Unlock()
	n := 0
	for _, f := range flows {
		f.mu.Lock()
		n += len(f.peers)
		f.mu.Unlock()
	}
	return n
}

// Every sandbox socket of the flow cap (512) sending to 1,024 addresses
// each: each mapping remembered every one (maxUDPPeers), 524,288 in all,
// seen taking 120 MB of the launcher's heap. The peers of all mappings
// together are bounded too (maxUDPPeersTotal, and one per mapping
// beyond); past it a mapping forgets one of its own to admit a new
// destination, and still admits it.
func TestUDPPeersAcrossFlowsAreBounded(t *testing.T) {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: unixPacketListener{h.dialer}, Now: h.clock.now})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	dst := func(d int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, byte(d >> 8), byte(d)}), uint16(1000+d))
	}
	for s := range DefaultMaxUDPFlows {
		src := netip.AddrPortFrom(jail4, uint16(20000+s))
		for d := range 1024 {
			h.send(udpBytes(src, dst(d), []byte("x")))
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := h.st.udpPeersHeld()
	t.Logf("%d flows remember %d peers; heap grew %d MB", h.st.UDPFlows(), held, (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>20)
	if h.st.UDPFlows() != DefaultMaxUDPFlows {
		t.Fatalf("%d flows, want %d", h.st.UDPFlows(), DefaultMaxUDPFlows)
	}
	if limit := maxUDPPeersTotal + DefaultMaxUDPFlows; held > limit {
		t.Fatalf("%d peers remembered across the flows, want at most %d", held, limit)
	}
	// A new destination of a mapping at the bound is still admitted.
	src := netip.AddrPortFrom(jail4, 20000)
	h.send(udpBytes(src, dst(5000), []byte("x")))
	h.st.mu.Lock()
	f := h.st.flows[flowKey{src: src, dst: netip.AddrPortFrom(netip.IPv4Unspecified(), 0)}]
	h.st.mu.Unlock()
	if f == nil {
		t.Fatal("no mapping for the first socket")
	}
	f.mu.Lock()
	_, ok := f.peers[dst(5000)]
	f.mu.Unlock()
	if !ok {
		t.Fatal("a new destination past the bound was not admitted")
	}
	if n := h.st.udpPeersHeld(); int64(n) != h.st.udpPeers.Load() {
		t.Fatalf("%d peers held, %d counted", n, h.st.udpPeers.Load())
	}
}
