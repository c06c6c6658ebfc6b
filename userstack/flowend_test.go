package userstack

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// waitEnd waits for Config.OnFlowEnd's report (the bound is only against
// a hang: the report is due by the time the test waits).
func waitEnd(t *testing.T, ends <-chan FlowEnd) FlowEnd {
	t.Helper()
	select {
	case e := <-ends:
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no flow end reported")
	}
	return FlowEnd{}
}

// A relayed TCP flow reports its end to Config.OnFlowEnd with the exact
// payload bytes each way (the sandbox's 3,000 written to the server, the
// server's 1,234 acknowledged by the sandbox), and "closed" after both
// FINs; the flow's start is its admission's (Config.OnFlow was told).
func TestFlowEndTCPBytes(t *testing.T) {
	const up, down = 3000, 1234
	inPrivateNetns(t, func() {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(nsServer, 8090).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			if _, err := io.ReadFull(c, make([]byte, up)); err == nil {
				_, _ = c.Write(bytes.Repeat([]byte("d"), down))
			}
		}()
		flows, ends := make(chan Flow, 4), make(chan FlowEnd, 4)
		h := &harness{blocks: &blocks{}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), DialTimeout: 5 * time.Second,
			OnFlow: func(f Flow) { flows <- f }, OnFlowEnd: func(e FlowEnd) { ends <- e }})
		src := netip.AddrPortFrom(jail4, 42100)
		dst := netip.AddrPortFrom(nsServer, 8090)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 100}.bytes())
		o := readOut(t, h.ep)
		if o.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck {
			t.Errorf("answer to the SYN: %v", o.tcp().Flags())
			return
		}
		iss := o.tcp().SequenceNumber()
		if f := <-flows; f.Src != src || f.Dst != dst || f.Proto != netpolicy.ProtoTCP {
			t.Errorf("OnFlow: %+v", f)
		}
		seq := uint32(101)
		ack := iss + 1
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: seq, ack: ack}.bytes())
		payload := bytes.Repeat([]byte("u"), up)
		for len(payload) > 0 {
			n := min(500, len(payload))
			h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: seq, ack: ack, payload: payload[:n]}.bytes())
			seq += uint32(n)
			payload = payload[n:]
		}
		got, fin := 0, false
		for !fin {
			o = readOut(t, h.ep)
			if o.tcp().Flags().Contains(header.TCPFlagRst) {
				t.Errorf("reset: %v", o.tcp().Flags())
				return
			}
			if p := o.tcpPayload(); len(p) > 0 {
				if o.tcp().SequenceNumber() != ack {
					continue // a retransmission
				}
				got += len(p)
				ack += uint32(len(p))
				h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: seq, ack: ack}.bytes())
			}
			if o.tcp().Flags().Contains(header.TCPFlagFin) && o.tcp().SequenceNumber()+uint32(len(o.tcpPayload())) == ack {
				fin = true
				ack++
			}
		}
		if got != down {
			t.Errorf("the sandbox got %d bytes, want %d", got, down)
		}
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagFin, seq: seq, ack: ack}.bytes())
		e := waitEnd(t, ends)
		if e.Proto != netpolicy.ProtoTCP || e.Src != src || e.Dst != dst || e.Up != up || e.Down != down || e.How != "closed" ||
			e.UpPackets != 0 || e.DownPackets != 0 || e.Start.IsZero() || e.Duration < 0 {
			t.Errorf("flow end: %+v, want %d bytes up, %d down, closed", e, up, down)
		}
	})
}

// A TCP flow the sandbox resets reports what was relayed until then, and
// how it ended.
func TestFlowEndTCPReset(t *testing.T) {
	inPrivateNetns(t, func() {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(nsServer, 8091).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		read := make(chan int, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				read <- -1
				return
			}
			defer c.Close()
			n, _ := io.ReadFull(c, make([]byte, 7))
			read <- n
			_, _ = io.Copy(io.Discard, c)
		}()
		ends := make(chan FlowEnd, 4)
		h := &harness{blocks: &blocks{}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), DialTimeout: 5 * time.Second,
			OnFlowEnd: func(e FlowEnd) { ends <- e }})
		src := netip.AddrPortFrom(jail4, 42101)
		dst := netip.AddrPortFrom(nsServer, 8091)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 100}.bytes())
		iss := readOut(t, h.ep).tcp().SequenceNumber()
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 101, ack: iss + 1, payload: []byte("1234567")}.bytes())
		if n := <-read; n != 7 {
			t.Errorf("the server read %d bytes", n)
		}
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagRst, seq: 108}.bytes())
		if e := waitEnd(t, ends); e.Up != 7 || e.Down != 0 || e.How != "reset by the sandbox" {
			t.Errorf("flow end: %+v, want 7 bytes up, reset by the sandbox", e)
		}
	})
}

// A UDP mapping reports each new destination to Config.OnFlow, and its
// end (here the idle timeout) to Config.OnFlowEnd with the datagrams and
// payload bytes each way and its duration on the stack's clock.
func TestFlowEndUDP(t *testing.T) {
	inPrivateNetns(t, func() {
		srv, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5370).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer srv.Close()
		flows, ends := make(chan Flow, 4), make(chan FlowEnd, 4)
		h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Now: h.clock.now,
			OnFlow: func(f Flow) { flows <- f }, OnFlowEnd: func(e FlowEnd) { ends <- e }})
		src := netip.AddrPortFrom(jail4, 42102)
		dst := netip.AddrPortFrom(nsServer, 5370)
		b := make([]byte, 64)
		var from net.Addr
		for _, p := range []string{"x", "yy"} {
			h.send(udpBytes(src, dst, []byte(p)))
			if _, from, err = srv.ReadFrom(b); err != nil {
				t.Error(err)
				return
			}
		}
		want := Flow{Proto: netpolicy.ProtoUDP, Src: src, Dst: dst, Target: dst, Rule: h.st.cfg.Policy.Check(netpolicy.ProtoUDP, dst).Rule}
		select { // told on the datagram's path, before it was sent
		case f := <-flows:
			if f != want {
				t.Errorf("OnFlow: %+v, want %+v", f, want)
			}
		default:
			t.Errorf("OnFlow not told of the UDP flow")
		}
		if len(flows) != 0 {
			t.Errorf("OnFlow told again of a destination the mapping admits: %+v", <-flows)
		}
		if _, err := srv.WriteTo([]byte("abcd"), from); err != nil {
			t.Error(err)
			return
		}
		if o := readOut(t, h.ep); string(o.udp().Payload()) != "abcd" {
			t.Errorf("reply: %q", o.udp().Payload())
		}
		h.clock.add(6 * time.Minute)
		if n := h.st.ExpireIdle(); n != 1 {
			t.Errorf("expired %d", n)
		}
		e := waitEnd(t, ends)
		if e.Proto != netpolicy.ProtoUDP || e.Src != src || e.Dst != dst || e.UpPackets != 2 || e.Up != 3 ||
			e.DownPackets != 1 || e.Down != 4 || e.How != "idle" || e.Duration != 6*time.Minute {
			t.Errorf("flow end: %+v, want 2 datagrams of 3 bytes up, 1 of 4 down, idle after 6m", e)
		}
	})
}

// The allowlist's resolver tells Config.OnFlow of each query it allowed,
// at most maxDNSRecords a second: the rest are counted, not told of (a
// sandbox looking names up in a loop does not flood the audit log).
func TestDNSRecordsBounded(t *testing.T) {
	var told atomic.Int64
	h := newNamesHarnessWith(t, map[string][]uint16{"api.test": {443}}, NameConfig{},
		func(c *Config) { c.OnFlow = func(f Flow) { told.Add(1) } })
	h.zone.addA("api.test", "203.0.113.10")
	// The clock stands still: one second's worth.
	for i := 0; i < maxDNSRecords+20; i++ {
		h.query(t, "api.test.", dnsmessage.TypeA)
	}
	if n := told.Load(); n != maxDNSRecords || h.st.DNSRecordsDropped() != 20 {
		t.Errorf("%d records, %d dropped; want %d and 20", told.Load(), h.st.DNSRecordsDropped(), maxDNSRecords)
	}
}

// A flow to a name whose first message the stack refuses (a ClientHello
// for another name) reports no payload up: the hello was held for the
// check, never written to the host socket; and it ended "refused".
func TestFlowEndNameRefusedNothingUp(t *testing.T) {
	ends := make(chan FlowEnd, 4)
	h := newNamesHarnessWith(t, map[string][]uint16{"api.test": nil}, NameConfig{},
		func(c *Config) { c.OnFlowEnd = func(e FlowEnd) { ends <- e } })
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	src := netip.AddrPortFrom(jail4, 46900)
	dst := netip.AddrPortFrom(api, 443)
	iss := h.handshake(t, src, dst)
	hello := clientHello(t, "other.test")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: hello}.bytes())
	h.waitRST(t)
	hostGets(t, h.zone.next(t), nil) // written nothing
	if e := waitEnd(t, ends); e.Up != 0 || e.Down != 0 || e.Name != "api.test" || e.How != "refused" {
		t.Fatalf("flow end: %+v, want nothing up or down, refused", e)
	}
}
