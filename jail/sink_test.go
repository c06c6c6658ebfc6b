package jail

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
)

// segment builds an IPv4 TCP segment from src to dst.
func segment(src, dst netip.AddrPort, flags header.TCPFlags, seq, ack uint32, payload string) []byte {
	s, d := tcpip.AddrFrom4(src.Addr().As4()), tcpip.AddrFrom4(dst.Addr().As4())
	l4 := header.TCPMinimumSize + len(payload)
	pkt := make([]byte, header.IPv4MinimumSize+l4)
	ip := header.IPv4(pkt)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: s, DstAddr: d})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(pkt[header.IPv4MinimumSize:])
	tcp.Encode(&header.TCPFields{SrcPort: src.Port(), DstPort: dst.Port(), SeqNum: seq, AckNum: ack, DataOffset: header.TCPMinimumSize, Flags: flags, WindowSize: 1024})
	copy(tcp[header.TCPMinimumSize:], payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, s, d, uint16(l4))
	tcp.SetChecksum(^tcp.CalculateChecksum(checksum.Checksum([]byte(payload), xsum)))
	return pkt
}

// The sink answers what the kernel routes to it as a closed port would,
// from the address the sandbox tried, and records only connection
// attempts.
func TestSinkResetsTCP(t *testing.T) {
	var got []netpolicy.Block
	s := &sink{pol: netpolicy.MustNew(netpolicy.Config{}), record: func(b netpolicy.Block) { got = append(got, b) }}
	src := netip.MustParseAddrPort("192.0.2.2:40000")
	dst := netip.MustParseAddrPort("10.1.2.3:22")
	for _, tt := range []struct {
		name     string
		in       []byte
		seq, ack uint32
		flags    header.TCPFlags
		blocks   int
	}{
		{"syn", segment(src, dst, header.TCPFlagSyn, 1000, 0, ""), 0, 1001, header.TCPFlagRst | header.TCPFlagAck, 1},
		{"data with ack", segment(src, dst, header.TCPFlagAck|header.TCPFlagPsh, 5, 77, "abc"), 77, 0, header.TCPFlagRst, 0},
		{"fin without ack", segment(src, dst, header.TCPFlagFin, 9, 0, "xy"), 0, 12, header.TCPFlagRst | header.TCPFlagAck, 0},
	} {
		got = nil
		out := s.refuse(tt.in)
		ip := header.IPv4(out)
		if out == nil || !ip.IsValid(len(out)) || !ip.IsChecksumValid() {
			t.Fatalf("%s: answer %x is not a valid IPv4 packet", tt.name, out)
		}
		tcp := header.TCP(ip.Payload())
		from, to := ip.SourceAddress(), ip.DestinationAddress()
		if from != tcpip.AddrFrom4(dst.Addr().As4()) || to != tcpip.AddrFrom4(src.Addr().As4()) || tcp.SourcePort() != 22 || tcp.DestinationPort() != 40000 {
			t.Errorf("%s: answer %v:%d -> %v:%d", tt.name, from, tcp.SourcePort(), to, tcp.DestinationPort())
		}
		if tcp.SequenceNumber() != tt.seq || tcp.AckNumber() != tt.ack || tcp.Flags() != tt.flags {
			t.Errorf("%s: answer seq %d ack %d %v, want %d %d %v", tt.name, tcp.SequenceNumber(), tcp.AckNumber(), tcp.Flags(), tt.seq, tt.ack, tt.flags)
		}
		if !tcp.IsChecksumValid(from, to, 0, 0) {
			t.Errorf("%s: answer's TCP checksum is invalid", tt.name)
		}
		if len(got) != tt.blocks || (tt.blocks == 1 && (got[0].Dst != dst || got[0].Proto != netpolicy.ProtoTCP)) {
			t.Errorf("%s: recorded %+v, want %d block(s) of tcp %v", tt.name, got, tt.blocks, dst)
		}
	}
	if out := s.refuse(segment(src, dst, header.TCPFlagRst, 1, 0, "")); out != nil {
		t.Errorf("a RST was answered: %x", out)
	}
}

// Issue 15: the sink trusts no header either. A TCP data offset below 5
// words or past the segment's end (which sliced out of range in the
// reset's payload length), and runts of every protocol, get no answer and
// no record; nothing panics.
func TestSinkDropsMalformedHeaders(t *testing.T) {
	var got []netpolicy.Block
	s := &sink{pol: netpolicy.MustNew(netpolicy.Config{}), record: func(b netpolicy.Block) { got = append(got, b) }}
	src := netip.MustParseAddrPort("192.0.2.2:40000")
	dst := netip.MustParseAddrPort("10.1.2.3:22")
	for _, words := range []byte{0, 4, 6, 15} {
		for _, payload := range []string{"", "0123456789"} {
			pkt := segment(src, dst, header.TCPFlagSyn, 1000, 0, payload)
			pkt[header.IPv4MinimumSize+header.TCPDataOffset] = words << 4
			if words == 6 && payload != "" {
				continue // a whole header with options: valid
			}
			if out := s.refuse(pkt); out != nil {
				t.Errorf("data offset %d words, %d bytes: answered", words, len(payload))
			}
		}
	}
	whole := segment(src, dst, header.TCPFlagSyn, 1000, 0, "")
	for n := 0; n < len(whole); n++ {
		s.refuse(whole[:n]) // truncated: must not panic
	}
	if len(got) != 0 {
		t.Errorf("malformed packets recorded: %+v", got)
	}
}

// The sink reads what the kernel routes to it from the sandbox: no packet,
// however malformed, may make it panic, and what it answers is a valid IP
// packet addressed back to the sender. (go test -fuzz FuzzSinkRefuse ./jail/)
func FuzzSinkRefuse(f *testing.F) {
	src := netip.MustParseAddrPort("192.0.2.2:40000")
	dst := netip.MustParseAddrPort("10.1.2.3:22")
	f.Add(segment(src, dst, header.TCPFlagSyn, 1000, 0, ""))
	f.Add(segment(src, dst, header.TCPFlagAck|header.TCPFlagPsh, 5, 77, "abc"))
	bad := segment(src, dst, header.TCPFlagSyn, 1000, 0, "")
	bad[header.IPv4MinimumSize+header.TCPDataOffset] = 15 << 4
	f.Add(bad)
	f.Add([]byte{0x60, 0, 0, 0, 0, 8, 17, 64})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		s := &sink{pol: netpolicy.MustNew(netpolicy.Config{}), record: func(netpolicy.Block) {}}
		out := s.refuse(pkt)
		if out == nil {
			return
		}
		switch header.IPVersion(out) {
		case header.IPv4Version:
			if ip := header.IPv4(out); !ip.IsValid(len(out)) || !ip.IsChecksumValid() {
				t.Fatalf("invalid IPv4 answer %x", out)
			}
		case header.IPv6Version:
			if !header.IPv6(out).IsValid(len(out)) {
				t.Fatalf("invalid IPv6 answer %x", out)
			}
		default:
			t.Fatalf("a non-IP answer %x", out)
		}
	})
}

// A flood of connection attempts to a blocked range costs a bounded
// number of block records: the sink's go through the stack's bounded,
// rate-limited queue (a burst of 1024, then userstack.BlockRecordRate a
// second), as the stack's own refusals do. Every attempt is refused all
// the same, and those beyond the bound are counted, the count reported in
// the summary when the jail closes. The clock stands still, so the bound
// is the burst.
func TestSinkFloodIsBoundedAndCounted(t *testing.T) {
	const burst = 1024 // userstack's blockBurst
	const n = 3 * burst
	var log, sum bytes.Buffer
	pol := netpolicy.MustNew(netpolicy.Config{})
	j := New(&Setup{Policy: pol}, Options{Log: &log, Summary: &sum})
	ep := channel.New(8, 1500, "")
	t.Cleanup(ep.Close)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := userstack.New(ep, userstack.Config{
		Policy:    pol,
		OnBlock:   j.record,
		NoJanitor: true,
		Now:       func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.stack = st
	j.mu.Unlock()
	s := j.newSink(nil, st)
	dst := netip.MustParseAddrPort("10.1.2.3:22")
	for i := range n {
		src := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), uint16(20000+i))
		if out := s.refuse(segment(src, dst, header.TCPFlagSyn, 1000, 0, "")); out == nil {
			t.Fatalf("SYN %d was not refused", i)
		}
	}
	j.Close() // delivers what was queued, then writes the summary
	lines := bytes.Count(log.Bytes(), []byte("\n"))
	if lines != burst || j.Blocked() != lines {
		t.Errorf("%d refused SYNs: %d records written, %d blocks counted; want the burst, %d", n, lines, j.Blocked(), burst)
	}
	if want := droppedNote(n - burst); !strings.Contains(sum.String(), want) {
		t.Errorf("summary %q does not report the records dropped: want %q", sum.String(), want)
	}
	var first netpolicy.Block
	if err := json.Unmarshal(bytes.SplitN(log.Bytes(), []byte("\n"), 2)[0], &first); err != nil || first.Dst != dst || first.Proto != netpolicy.ProtoTCP || !first.Time.Equal(now) {
		t.Errorf("first record %+v (%v), want tcp %v at %v", first, err, dst, now)
	}
}
