package userstack

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Urgent data (MSG_OOB) is relayed both ways, as a kernel on the path
// would see it (issue 15; it went in line, unmarked): the sandbox's
// urgent byte reaches the server as urgent (recv MSG_OOB gets it, the
// stream goes on without it), and the server's urgent byte reaches the
// sandbox in a segment with URG set and the urgent pointer one past it.
func TestNativeTCPUrgentData(t *testing.T) {
	inPrivateNetns(t, func() {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(nsServer, 8090).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				c = nil
			}
			accepted <- c
		}()
		h := newNativeHarness(t, 5*time.Second)
		src := netip.AddrPortFrom(jail4, 42010)
		dst := netip.AddrPortFrom(nsServer, 8090)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 100}.bytes())
		iss := readOut(t, h.ep).tcp().SequenceNumber()
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 101, ack: iss + 1}.bytes())
		c := <-accepted
		if c == nil {
			t.Error("no connection")
			return
		}
		defer c.Close()
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		// The sandbox sends "abcd" with "c" urgent (pointer 3: one past it).
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh | header.TCPFlagUrg, seq: 101, ack: iss + 1, urg: 3, payload: []byte("abcd")}.bytes())
		var oob [1]byte
		n, rerr := 0, error(nil)
		for i := 0; i < 2000; i++ { // the segment is written before h.send returns; a failsafe
			_ = rc.Control(func(fd uintptr) {
				n, _, rerr = unix.Recvfrom(int(fd), oob[:], unix.MSG_OOB|unix.MSG_DONTWAIT)
			})
			if rerr == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if rerr != nil || n != 1 || oob[0] != 'c' {
			t.Errorf("the server's recv(MSG_OOB): %q, %v; want the sandbox's urgent byte c", oob[:max(n, 0)], rerr)
		}
		stream := make([]byte, 3)
		if _, err := io.ReadFull(c, stream); err != nil || string(stream) != "abd" {
			t.Errorf("the server's stream: %q, %v; want abd (the urgent byte out of it)", stream, err)
		}
		// The server sends "xy", then "z" urgent, then "w".
		if _, err := c.Write([]byte("xy")); err != nil {
			t.Error(err)
			return
		}
		_ = rc.Control(func(fd uintptr) { _, rerr = unix.SendmsgN(int(fd), []byte("z"), nil, nil, unix.MSG_OOB) })
		if rerr != nil {
			t.Error(rerr)
			return
		}
		if _, err := c.Write([]byte("w")); err != nil {
			t.Error(err)
			return
		}
		var got []byte
		marked := false
		for len(got) < 4 {
			o := readOut(t, h.ep)
			p := o.tcpPayload()
			if len(p) == 0 {
				continue
			}
			seq := o.tcp().SequenceNumber()
			if o.tcp().Flags().Contains(header.TCPFlagUrg) {
				up := seq + uint32(o.tcp().UrgentPointer())
				if int(up-seq) <= len(p) && p[up-seq-1] == 'z' {
					marked = true
				} else {
					t.Errorf("URG on %q with pointer %d", p, o.tcp().UrgentPointer())
				}
			}
			if want := iss + 1 + uint32(len(got)); seq != want {
				t.Errorf("segment at %d, want %d", seq, want)
			}
			got = append(got, p...)
		}
		if string(got) != "xyzw" || !marked {
			t.Errorf("the sandbox got %q, urgent byte marked %v; want xyzw with z marked", got, marked)
		}
	})
}

// The server's urgent byte sent before the sandbox's handshake ends (a
// server that speaks first, at once) is still marked when it goes to the
// sandbox: the relay hears of it while the SYN-ACK waits for its ACK, and
// the read after the handshake stops at its mark. It went unmarked before
// (the wait for the handshake watched for data only, and the first read
// took the byte in line before the urgent event was looked at).
func TestNativeTCPUrgentBeforeHandshakeEnds(t *testing.T) {
	inPrivateNetns(t, func() {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(nsServer, 8091).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				c = nil
			}
			accepted <- c
		}()
		h := newNativeHarness(t, 5*time.Second)
		src := netip.AddrPortFrom(jail4, 42011)
		dst := netip.AddrPortFrom(nsServer, 8091)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 100}.bytes())
		iss := readOut(t, h.ep).tcp().SequenceNumber()
		c := <-accepted
		if c == nil {
			t.Error("no connection")
			return
		}
		defer c.Close()
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		var werr error
		_ = rc.Control(func(fd uintptr) { _, werr = unix.SendmsgN(int(fd), []byte("z"), nil, nil, unix.MSG_OOB) })
		if werr != nil {
			t.Error(werr)
			return
		}
		// Until the relay has heard of the host's data (failsafe bound,
		// not a timing assertion).
		spoke := func() bool {
			h.st.mu.Lock()
			f := h.st.tcp[flowKey{src: src, dst: dst}]
			h.st.mu.Unlock()
			if f == nil {
				return false
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.has(hostSpokeFirst)
		}
		for i := 0; !spoke(); i++ {
			if i == 4000 {
				t.Error("the relay never heard of the host's first byte")
				return
			}
			time.Sleep(time.Millisecond)
		}
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 101, ack: iss + 1}.bytes())
		o := readOut(t, h.ep)
		p := o.tcpPayload()
		if string(p) != "z" || !o.tcp().Flags().Contains(header.TCPFlagUrg) || o.tcp().UrgentPointer() != 1 {
			t.Errorf("the sandbox got %q with %v, urgent pointer %d; want z marked urgent (pointer 1)", p, o.tcp().Flags(), o.tcp().UrgentPointer())
		}
	})
}
