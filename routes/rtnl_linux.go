package routes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The package's own rtnetlink requests for links and addresses, and the
// route dump the jail's discovery reads. They replace a netlink library
// whose receive path kept a 64 KiB array on the stack: the first call of
// a goroutine grew its stack to 128 KiB and zeroed it, about 30 page
// faults in each of the launcher and the holder (issue 33). Here a
// request's answer is read into one heap buffer of rtnlBufSize, kept
// across requests.

// rtnlBufSize is the receive buffer of requests and dumps: the kernel
// sizes a dump's datagrams to the reader's buffer (at least a page's
// worth, NLMSG_GOODSIZE), and an ack is a few dozen bytes. A datagram
// longer than the buffer is never cut short silently: a dump starts over
// with a buffer that fits it (readDump).
const rtnlBufSize = 8 << 10

// nlMsg encodes one netlink request: header (numbered seq, asking for an
// ack), then body.
func nlMsg(typ, flags uint16, seq uint32, body []byte) []byte {
	msg := make([]byte, 0, unix.NLMSG_HDRLEN+len(body))
	msg = binary.NativeEndian.AppendUint32(msg, uint32(unix.NLMSG_HDRLEN+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, unix.NLM_F_REQUEST|flags)
	msg = binary.NativeEndian.AppendUint32(msg, seq)
	msg = binary.NativeEndian.AppendUint32(msg, 0)
	return append(msg, body...)
}

// linkMsg encodes an RTM_NEWLINK changing link index: the flags in
// change set to flags' values, then attrs (encoded attributes).
func linkMsg(index, flags, change uint32, seq uint32, attrs ...[]byte) []byte {
	// struct ifinfomsg: family, pad, type, index, flags, change.
	body := make([]byte, 0, unix.SizeofIfInfomsg)
	body = append(body, unix.AF_UNSPEC, 0, 0, 0)
	body = binary.NativeEndian.AppendUint32(body, index)
	body = binary.NativeEndian.AppendUint32(body, flags)
	body = binary.NativeEndian.AppendUint32(body, change)
	for _, a := range attrs {
		body = append(body, a...)
	}
	return nlMsg(unix.RTM_NEWLINK, unix.NLM_F_ACK, seq, body)
}

// linkUpMsg sets link index up.
func linkUpMsg(index, seq uint32) []byte {
	return linkMsg(index, unix.IFF_UP, unix.IFF_UP, seq)
}

// linkConfigMsg sets link index's MTU and transmit queue length.
func linkConfigMsg(index uint32, mtu, txqlen int, seq uint32) []byte {
	return linkMsg(index, 0, 0, seq,
		attr(unix.IFLA_MTU, binary.NativeEndian.AppendUint32(nil, uint32(mtu))),
		attr(unix.IFLA_TXQLEN, binary.NativeEndian.AppendUint32(nil, uint32(txqlen))))
}

// addrGenModeMsg sets link index's IPv6 address generation mode.
func addrGenModeMsg(index uint32, mode uint8, seq uint32) []byte {
	inet6 := attr(unix.IFLA_INET6_ADDR_GEN_MODE, []byte{mode})
	return linkMsg(index, 0, 0, seq, attr(unix.IFLA_AF_SPEC, attr(unix.AF_INET6, inet6)))
}

// addrMsg encodes the RTM_NEWADDR of OpAddrAdd: address p on link index,
// no prefix route, no duplicate address detection (a TUN has no
// neighbours, and a tentative address would delay the first connection).
func addrMsg(index uint32, p netip.Prefix, seq uint32) ([]byte, error) {
	if !p.IsValid() {
		return nil, fmt.Errorf("invalid address %v", p)
	}
	fam := uint8(unix.AF_INET)
	if p.Addr().Is6() {
		fam = unix.AF_INET6
	}
	a := p.Addr().AsSlice()
	// struct ifaddrmsg: family, prefixlen, flags (the low 8 bits; all of
	// them in IFA_FLAGS), scope, index.
	body := []byte{fam, uint8(p.Bits()), 0, unix.RT_SCOPE_UNIVERSE}
	body = binary.NativeEndian.AppendUint32(body, index)
	body = append(body, attr(unix.IFA_LOCAL, a)...)
	body = append(body, attr(unix.IFA_ADDRESS, a)...)
	body = append(body, attr(unix.IFA_FLAGS, binary.NativeEndian.AppendUint32(nil, unix.IFA_F_NOPREFIXROUTE|unix.IFA_F_NODAD))...)
	return nlMsg(unix.RTM_NEWADDR, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq, body), nil
}

// request sends one message numbered seq on fd and waits for its ack,
// reading into rb.
func request(fd int, rb []byte, msg []byte, seq uint32) error {
	drain(fd)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	return awaitAck(fd, rb, seq)
}

// Route is one route of a [DumpRoutes] dump, as the kernel reports it.
type Route struct {
	Family   uint8 // AF_INET or AF_INET6 (also for the multicast tables)
	Table    uint32
	Protocol uint8
	Scope    uint8
	Type     uint8  // RTN_*
	Flags    uint32 // RTM_F_*
	// Dst is the destination; a default route's is 0.0.0.0/0 or ::/0.
	Dst      netip.Prefix
	Gw       netip.Addr // RTA_GATEWAY; invalid when there is none
	Link     uint32     // RTA_OIF; 0 when there is none
	Priority uint32     // the metric
	// MultiPath are the next hops of a multipath route.
	MultiPath []NextHop
}

// NextHop is one next hop of a multipath route.
type NextHop struct {
	Gw   netip.Addr
	Link uint32
	Hops uint8 // the weight less one
}

// The multicast routing tables' families (linux/rtnetlink.h), and the
// bits of an attribute's type that are its type (without NLA_F_NESTED and
// NLA_F_NET_BYTEORDER).
const (
	rtnlFamilyIPMR  = 128
	rtnlFamilyIP6MR = 129
	nlaTypeMask     = 0x3fff
)

// errTruncated is a datagram longer than the buffer it was read into.
type errTruncated int

func (e errTruncated) Error() string {
	return fmt.Sprintf("netlink datagram of %d bytes truncated", int(e))
}

// errDumpInterrupted is a dump the kernel marked inconsistent (the
// tables changed while it was read).
var errDumpInterrupted = errors.New("route dump interrupted by a change")

// DumpRoutes returns the routes of every table of every IP family in the
// calling thread's network namespace, as `ip route show table all` and
// `ip -6 route show table all` list them (cached clones left out). A dump
// the tables changed under, or whose datagram outgrew the buffer, is
// read again (a few times, then it fails).
func DumpRoutes() ([]Route, error) {
	return dumpRoutes(openRtnetlink, rtnlBufSize)
}

// dumpRoutes is DumpRoutes through sockets open opens, one an attempt
// (a dump left unread keeps its socket busy), starting with a receive
// buffer of bufSize bytes.
func dumpRoutes(open func() (int, error), bufSize int) ([]Route, error) {
	rb := make([]byte, bufSize)
	var err error
	for range 4 {
		var rs []Route
		rs, err = readDump(open, rb)
		var trunc errTruncated
		switch {
		case err == nil:
			return rs, nil
		case errors.As(err, &trunc):
			rb = make([]byte, max(2*len(rb), (int(trunc)+4095)&^4095))
		case errors.Is(err, errDumpInterrupted):
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("route dump: %w", err)
}

// readDump asks for the route dump on a socket from open and reads it.
func readDump(open func() (int, error), rb []byte) ([]Route, error) {
	fd, err := open()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	const seq = 1
	// struct rtmsg, all zero: every family, every table.
	req := nlMsg(unix.RTM_GETROUTE, unix.NLM_F_DUMP, seq, make([]byte, unix.SizeofRtMsg))
	// A write goes to the kernel (a bound netlink socket's default
	// destination), as Sendto to it would; tests read it from a socket
	// pair.
	if _, err := unix.Write(fd, req); err != nil {
		return nil, fmt.Errorf("route dump: %w", err)
	}
	var out []Route
	for {
		n, _, err := unix.Recvfrom(fd, rb, unix.MSG_TRUNC)
		if err == unix.EINTR {
			continue // see sendBatch
		}
		if err != nil {
			return nil, fmt.Errorf("route dump: %w", err)
		}
		if n > len(rb) {
			return nil, errTruncated(n)
		}
		var done bool
		out, done, err = parseRouteDump(rb[:n], seq, out)
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
	}
}

// parseRouteDump decodes one datagram of the route dump numbered seq,
// appending its routes to out; done is the dump's end. Messages of
// another number are skipped, and so are routes of families other than
// IP and cached clones. Malformed bytes are an error, never a panic: it
// reads only within each length it has checked, and every step moves on.
func parseRouteDump(b []byte, seq uint32, out []Route) (_ []Route, done bool, err error) {
	for len(b) > 0 {
		if len(b) < unix.NLMSG_HDRLEN {
			return out, false, errors.New("route dump: short netlink header")
		}
		l := binary.NativeEndian.Uint32(b[0:4])
		typ := binary.NativeEndian.Uint16(b[4:6])
		flags := binary.NativeEndian.Uint16(b[6:8])
		mseq := binary.NativeEndian.Uint32(b[8:12])
		if l < unix.NLMSG_HDRLEN || uint64(l) > uint64(len(b)) {
			return out, false, fmt.Errorf("route dump: netlink message length %d of %d bytes", l, len(b))
		}
		data := b[unix.NLMSG_HDRLEN:l]
		b = b[min(len(b), int(nlAlign(l))):]
		if mseq != seq {
			continue
		}
		if flags&unix.NLM_F_DUMP_INTR != 0 {
			return out, false, errDumpInterrupted
		}
		switch typ {
		case unix.NLMSG_DONE:
			if len(data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(data[:4])); code < 0 {
					return out, true, fmt.Errorf("route dump: %w", unix.Errno(-code))
				}
			}
			return out, true, nil
		case unix.NLMSG_ERROR:
			if len(data) < 4 {
				return out, false, errors.New("route dump: short netlink error")
			}
			if code := int32(binary.NativeEndian.Uint32(data[:4])); code < 0 {
				return out, true, fmt.Errorf("route dump: %w", unix.Errno(-code))
			}
		case unix.RTM_NEWROUTE:
			r, ok, err := parseRoute(data)
			if err != nil {
				return out, false, err
			}
			if ok {
				out = append(out, r)
			}
		}
	}
	return out, false, nil
}

// nlAlign rounds l up to netlink's 4-byte alignment.
func nlAlign(l uint32) uint64 { return (uint64(l) + 3) &^ 3 }

// parseRoute decodes an RTM_NEWROUTE's body; ok is false for a route
// DumpRoutes leaves out.
func parseRoute(b []byte) (r Route, ok bool, err error) {
	if len(b) < unix.SizeofRtMsg {
		return r, false, errors.New("route dump: short route message")
	}
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol,
	// scope, type, flags.
	alen := 0
	switch b[0] {
	case unix.AF_INET, rtnlFamilyIPMR:
		r.Family, alen = unix.AF_INET, 4
	case unix.AF_INET6, rtnlFamilyIP6MR:
		r.Family, alen = unix.AF_INET6, 16
	default:
		return r, false, nil
	}
	dstLen := int(b[1])
	r.Table, r.Protocol, r.Scope, r.Type = uint32(b[4]), b[5], b[6], b[7]
	r.Flags = binary.NativeEndian.Uint32(b[8:12])
	if r.Flags&unix.RTM_F_CLONED != 0 {
		return r, false, nil
	}
	if dstLen > 8*alen {
		return r, false, fmt.Errorf("route dump: destination length %d", dstLen)
	}
	dst := netip.IPv4Unspecified()
	if alen == 16 {
		dst = netip.IPv6Unspecified()
	}
	err = eachAttr(b[unix.SizeofRtMsg:], func(typ uint16, v []byte) error {
		switch typ {
		case unix.RTA_DST:
			a, err := addrOf(v, alen)
			if err != nil {
				return err
			}
			dst = a
		case unix.RTA_GATEWAY:
			a, err := addrOf(v, alen)
			if err != nil {
				return err
			}
			r.Gw = a
		case unix.RTA_OIF:
			return u32Of(v, &r.Link)
		case unix.RTA_PRIORITY:
			return u32Of(v, &r.Priority)
		case unix.RTA_TABLE:
			return u32Of(v, &r.Table)
		case unix.RTA_MULTIPATH:
			return parseNextHops(v, alen, &r.MultiPath)
		}
		return nil
	})
	if err != nil {
		return r, false, err
	}
	r.Dst = netip.PrefixFrom(dst, dstLen)
	return r, true, nil
}

// parseNextHops decodes RTA_MULTIPATH's struct rtnexthop list.
func parseNextHops(b []byte, alen int, out *[]NextHop) error {
	for len(b) > 0 {
		if len(b) < unix.SizeofRtNexthop {
			return errors.New("route dump: short next hop")
		}
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < unix.SizeofRtNexthop || l > len(b) {
			return fmt.Errorf("route dump: next hop length %d of %d bytes", l, len(b))
		}
		nh := NextHop{Hops: b[3], Link: binary.NativeEndian.Uint32(b[4:8])}
		err := eachAttr(b[unix.SizeofRtNexthop:l], func(typ uint16, v []byte) error {
			if typ == unix.RTA_GATEWAY {
				a, err := addrOf(v, alen)
				if err != nil {
					return err
				}
				nh.Gw = a
			}
			return nil
		})
		if err != nil {
			return err
		}
		*out = append(*out, nh)
		b = b[min(len(b), int(nlAlign(uint32(l)))):]
	}
	return nil
}

// eachAttr calls f with each attribute of b (its type without the nested
// and byte-order flags, and its value).
func eachAttr(b []byte, f func(typ uint16, v []byte) error) error {
	for len(b) > 0 {
		if len(b) < unix.SizeofRtAttr {
			return errors.New("route dump: short attribute")
		}
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < unix.SizeofRtAttr || l > len(b) {
			return fmt.Errorf("route dump: attribute length %d of %d bytes", l, len(b))
		}
		if err := f(binary.NativeEndian.Uint16(b[2:4])&nlaTypeMask, b[unix.SizeofRtAttr:l]); err != nil {
			return err
		}
		b = b[min(len(b), int(nlAlign(uint32(l)))):]
	}
	return nil
}

// addrOf is an address attribute's value, of alen bytes.
func addrOf(v []byte, alen int) (netip.Addr, error) {
	if len(v) != alen {
		return netip.Addr{}, fmt.Errorf("route dump: address of %d bytes, want %d", len(v), alen)
	}
	a, _ := netip.AddrFromSlice(v)
	return a, nil
}

// u32Of reads a 32-bit attribute's value into p.
func u32Of(v []byte, p *uint32) error {
	if len(v) != 4 {
		return fmt.Errorf("route dump: 32-bit attribute of %d bytes", len(v))
	}
	*p = binary.NativeEndian.Uint32(v)
	return nil
}
