package routes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Namespace is a running jail namespace's kernel layer as [Update]
// changes it: its routes and its filter. [Netlink] (used from inside the
// namespace) and [Conn] (from anywhere, through sockets opened inside)
// are the two.
type Namespace interface {
	AddRoute(Op) error
	ReplaceRoute(Op) error
	DeleteRoute(Op) error
	InstallFilter(*Filter) error
}

// AddRoute adds a route operation's route.
func (n *Netlink) AddRoute(op Op) error { return n.Exec(op) }

// ReplaceRoute installs op in place of the route with its destination.
func (n *Netlink) ReplaceRoute(op Op) error { return n.replace(op) }

// DeleteRoute removes the route op added.
func (n *Netlink) DeleteRoute(op Op) error { return n.delete(op) }

// InstallFilter installs f in the calling process's namespace.
func (n *Netlink) InstallFilter(f *Filter) error { return InstallFilter(f) }

// Conn reaches a jail namespace's routes and filter through two netlink
// sockets (rtnetlink and netfilter) opened inside it by [OpenSockets]. A
// socket stays bound to the network namespace it was opened in wherever
// its descriptor goes, so the process that receives them (over SCM_RIGHTS)
// changes that namespace from its own. The kernel checks, for each
// message, that the socket's opener had CAP_NET_ADMIN over the namespace
// and that the sender has it too: the launcher, whose user owns the
// jail's user namespace, does; the sandbox, in a user namespace nested
// below, holds no such socket.
type Conn struct {
	mu    sync.Mutex
	rb    []byte // the rtnetlink socket's receive buffer
	rt    *os.File
	nf    *os.File
	links map[string]uint32
	seq   uint32
}

// Sockets are the descriptors [OpenSockets] opens, and the link indexes
// a Conn needs (links are never re-created while the jail runs).
type Sockets struct {
	Route, Netfilter *os.File
	Links            map[string]uint32
}

// OpenSockets opens, in the current network namespace, the two netlink
// sockets of a [Conn] and reads the indexes of the named links.
func OpenSockets(links ...string) (Sockets, error) {
	var s Sockets
	s.Links = map[string]uint32{}
	for _, name := range links {
		index, err := linkIndex(name)
		if err != nil {
			return s, err
		}
		s.Links[name] = index
	}
	rt, err := openRtnetlink()
	if err != nil {
		return s, err
	}
	nf, err := openNetfilter()
	if err != nil {
		unix.Close(rt)
		return s, err
	}
	s.Route, s.Netfilter = os.NewFile(uintptr(rt), "rtnetlink"), os.NewFile(uintptr(nf), "nfnetlink")
	return s, nil
}

// NewConn returns a Conn over s; it owns s's descriptors from now on.
func NewConn(s Sockets) *Conn {
	return &Conn{rb: make([]byte, rtnlBufSize), rt: s.Route, nf: s.Netfilter, links: s.Links}
}

// Close closes the sockets; a call under way fails.
func (c *Conn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rt.Close()
	c.nf.Close()
}

// AddRoute adds op's route (it must not exist).
func (c *Conn) AddRoute(op Op) error {
	return c.route(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, op)
}

// ReplaceRoute installs op's route in place of the one with its
// destination.
func (c *Conn) ReplaceRoute(op Op) error {
	return c.route(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, op)
}

// DeleteRoute removes op's route.
func (c *Conn) DeleteRoute(op Op) error { return c.route(unix.RTM_DELROUTE, 0, op) }

// InstallFilter installs f as [InstallFilter] does.
func (c *Conn) InstallFilter(f *Filter) error {
	if f == nil {
		return errors.New("no filter")
	}
	oif, ok := c.links[f.Dev]
	if !ok {
		return fmt.Errorf("filter: no link %s", f.Dev)
	}
	var sink uint32
	if f.Sink != "" {
		if sink, ok = c.links[f.Sink]; !ok {
			return fmt.Errorf("filter: no link %s", f.Sink)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return withFD(c.nf, func(fd int) error { return installFilterOn(fd, &c.seq, f, oif, sink) })
}

// withFD runs f on the descriptor of an open file, or fails if closed.
func withFD(file *os.File, f func(int) error) error {
	rc, err := file.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// route sends one route message for op and waits for the kernel's ack.
func (c *Conn) route(typ uint16, flags uint16, op Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg, err := routeMsg(typ, flags, op, c.seq+1, func(name string) (uint32, bool) {
		idx, ok := c.links[name]
		return idx, ok
	})
	if err != nil {
		return err
	}
	return withFD(c.rt, func(fd int) error {
		drain(fd)
		c.seq++
		if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return err
		}
		return awaitAck(fd, c.rb, c.seq)
	})
}

// routeMsg encodes the rtnetlink message of a route operation (typ
// RTM_NEWROUTE or RTM_DELROUTE, with flags), numbered seq and asking for
// an ack; link gives a link's index by name. One encoder for the setup's
// routes (Netlink.ExecRoutes) and the live updates (Conn).
func routeMsg(typ, flags uint16, op Op, seq uint32, link func(string) (uint32, bool)) ([]byte, error) {
	return appendRouteMsg(nil, typ, flags, op, seq, link)
}

// routeMsgMax is the length of the longest route message: header,
// struct rtmsg, an IPv6 RTA_DST and RTA_OIF.
const routeMsgMax = unix.NLMSG_HDRLEN + unix.SizeofRtMsg + unix.SizeofRtAttr + 16 + unix.SizeofRtAttr + 4

// appendRouteMsg is routeMsg appending to dst (dst unchanged on an
// error): the setup's batch is encoded in one buffer.
func appendRouteMsg(dst []byte, typ, flags uint16, op Op, seq uint32, link func(string) (uint32, bool)) ([]byte, error) {
	if !op.Prefix.IsValid() {
		return dst, fmt.Errorf("invalid destination %v", op.Prefix)
	}
	fam, alen := uint8(unix.AF_INET), 4
	if op.Prefix.Addr().Is6() {
		fam, alen = unix.AF_INET6, 16
	}
	scope := uint8(unix.RT_SCOPE_UNIVERSE)
	if typ == unix.RTM_DELROUTE {
		scope = unix.RT_SCOPE_NOWHERE // any
	}
	var rtype uint8
	var oif uint32
	switch op.Kind {
	case OpDefault, OpPunch, OpSink:
		idx, ok := link(op.Link)
		if !ok {
			return dst, fmt.Errorf("no link %s", op.Link)
		}
		rtype, oif = unix.RTN_UNICAST, idx
		if typ != unix.RTM_DELROUTE {
			scope = unix.RT_SCOPE_LINK // as ip(8) does for a route without a gateway
		}
	default:
		return dst, fmt.Errorf("not a route operation: %v", op.Kind)
	}
	l := unix.NLMSG_HDRLEN + unix.SizeofRtMsg + unix.SizeofRtAttr + alen
	if oif != 0 {
		l += unix.SizeofRtAttr + 4
	}
	msg := binary.NativeEndian.AppendUint32(dst, uint32(l))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	msg = binary.NativeEndian.AppendUint32(msg, seq)
	msg = binary.NativeEndian.AppendUint32(msg, 0)
	// struct rtmsg, then RTA_DST and RTA_OIF.
	msg = append(msg, fam, uint8(op.Prefix.Bits()), 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, scope, rtype, 0, 0, 0, 0)
	msg = binary.NativeEndian.AppendUint16(msg, uint16(unix.SizeofRtAttr+alen))
	msg = binary.NativeEndian.AppendUint16(msg, unix.RTA_DST)
	a16 := op.Prefix.Addr().As16()
	if alen == 4 {
		a4 := op.Prefix.Addr().As4()
		msg = append(msg, a4[:]...)
	} else {
		msg = append(msg, a16[:]...)
	}
	if oif != 0 {
		msg = binary.NativeEndian.AppendUint16(msg, unix.SizeofRtAttr+4)
		msg = binary.NativeEndian.AppendUint16(msg, unix.RTA_OIF)
		msg = binary.NativeEndian.AppendUint32(msg, oif)
	}
	return msg, nil
}

// openRtnetlink opens a route netlink socket in the current network
// namespace, bound, with a 5 s bound on each wait for the kernel.
// linkIndex returns the index of the link name in the calling process's
// network namespace: one SIOCGIFINDEX on a throwaway socket, as
// if_nametoindex(3) does. net.InterfaceByName dumps and parses every link
// over netlink for it, fresh memory in the holder, where every page is a
// page fault (about 12 a call on machine class B: issue 33).
func linkIndex(name string) (uint32, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, fmt.Errorf("link %s: %w", name, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("link %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("link %s: %w", name, err)
	}
	return ifr.Uint32(), nil
}

func openRtnetlink() (int, error) {
	return openNetlinkSocket(unix.NETLINK_ROUTE, "rtnetlink socket", "rtnetlink bind")
}

// openNetlinkSocket opens a netlink socket of protocol proto in the
// current network namespace, bound, with a 5 s bound on each wait for the
// kernel; its errors begin with sockWhat or bindWhat.
func openNetlinkSocket(proto int, sockWhat, bindWhat string) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", sockWhat, err)
	}
	tv := unix.Timeval{Sec: 5}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %w", bindWhat, err)
	}
	return fd, nil
}

// awaitAck waits for the kernel's answer to message seq on fd, reading
// into rb.
func awaitAck(fd int, rb []byte, seq uint32) error {
	var got error
	done := false
	if err := awaitAcks(fd, rb, func(s uint32, e error) {
		if s == seq {
			got, done = e, true
		}
	}, func() bool { return done }); err != nil {
		return err
	}
	return got
}

// awaitAcks reads the kernel's answers on fd, telling each (its sequence
// number and error, nil for success) to answer, until done; it fails only
// when the socket does (or on a malformed answer). It reads into rb.
func awaitAcks(fd int, rb []byte, answer func(seq uint32, err error), done func() bool) error {
	for !done() {
		n, _, err := unix.Recvfrom(fd, rb, 0)
		if err == unix.EINTR {
			continue // see sendBatch
		}
		if err != nil {
			return fmt.Errorf("waiting for the kernel's answer: %w", err)
		}
		nms, err := syscallParse(rb[:n])
		if err != nil {
			return err
		}
		for _, m := range nms {
			if m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short netlink error")
			}
			var e error
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				e = unix.Errno(-code)
			}
			answer(m.Header.Seq, e)
		}
	}
	return nil
}
