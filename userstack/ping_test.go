package userstack

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// fakePinger answers for the addresses in up, and records every call.
type fakePinger struct {
	mu    sync.Mutex
	up    map[netip.Addr]bool
	calls []netip.Addr
}

func (p *fakePinger) Ping(_ context.Context, dst netip.Addr, payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, dst)
	if string(payload) != "ping" {
		return errors.New("payload not carried: " + string(payload))
	}
	if !p.up[dst] {
		return errors.New("no reply")
	}
	return nil
}

func (p *fakePinger) called() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]netip.Addr(nil), p.calls...)
}

func TestICMPEchoProxied(t *testing.T) {
	internet4 := netip.MustParseAddr("203.0.113.7")
	internet6 := netip.MustParseAddr("2001:db8::7")
	down := netip.MustParseAddr("203.0.113.8")
	pinger := &fakePinger{up: map[netip.Addr]bool{internet4: true, internet6: true}}
	ep := channel.New(64, 65520, "")
	st, err := New(ep, Config{
		Policy:   netpolicy.MustNew(netpolicy.Config{}),
		Dialer:   newFakeDialer(),
		Gateways: []netip.Addr{gateway4},
		Pinger:   pinger,
		Logf:     t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close(); ep.Close() }()

	// An allowed destination that answers the host: the sandbox gets the
	// reply, from that destination, with its own id, sequence and data.
	for _, c := range []struct{ src, dst netip.Addr }{{jail4, internet4}, {jail6, internet6}} {
		proto, b := echoBytes(c.src, c.dst)
		inject(ep, proto, b)
		o := readOut(t, ep)
		if o.src != c.dst || o.dst != c.src {
			t.Fatalf("echo reply %v -> %v, want %v -> %v", o.src, o.dst, c.dst, c.src)
		}
		if c.dst.Is4() {
			ic := header.ICMPv4(o.transport)
			if ic.Type() != header.ICMPv4EchoReply || ic.Ident() != 7 || ic.Sequence() != 1 || string(ic.Payload()) != "ping" {
				t.Fatalf("IPv4 reply: type %d id %d seq %d payload %q", ic.Type(), ic.Ident(), ic.Sequence(), ic.Payload())
			}
			if checksum.Checksum(o.transport, 0) != 0xffff {
				t.Fatal("IPv4 echo reply checksum is wrong")
			}
		} else {
			ic := header.ICMPv6(o.transport)
			if ic.Type() != header.ICMPv6EchoReply || ic.Ident() != 7 || ic.Sequence() != 1 || string(o.transport[header.ICMPv6EchoMinimumSize:]) != "ping" {
				t.Fatalf("IPv6 reply: type %d id %d seq %d", ic.Type(), ic.Ident(), ic.Sequence())
			}
			want := header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: ic, Src: tcpAddr(o.src), Dst: tcpAddr(o.dst)})
			if want != 0 && ic.Checksum() == 0 {
				t.Fatal("IPv6 echo reply has no checksum")
			}
		}
	}
	// A destination that does not answer the host gets no reply, and a
	// blocked one is never pinged from the host at all.
	for _, dst := range []netip.Addr{down, netip.MustParseAddr("10.1.2.3")} {
		proto, b := echoBytes(jail4, dst)
		inject(ep, proto, b)
	}
	for i := 0; i < 200 && len(pinger.called()) < 3; i++ {
		time.Sleep(5 * time.Millisecond) // bounded wait for the proxy goroutine
	}
	if q := ep.NumQueued(); q != 0 {
		o := readOut(t, ep)
		t.Fatalf("unexpected reply from %v", o.src)
	}
	for _, a := range pinger.called() {
		if a == netip.MustParseAddr("10.1.2.3") {
			t.Fatal("a blocked destination was pinged from the host")
		}
	}
}
