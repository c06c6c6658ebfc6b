package routes

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netlink is the production [Executor]: it applies operations with a
// netlink handle bound to the network namespace that was current when
// [OpenNetlink] was called.
type Netlink struct {
	h     *netlink.Handle
	links map[string]netlink.Link // by name: one lookup per link, not per route
	rt    int                     // a raw rtnetlink socket for ExecRoutes, once opened; else -1
	seq   uint32
}

// OpenNetlink opens a netlink handle in the calling thread's current
// network namespace. Call it inside the jail's namespace.
func OpenNetlink() (*Netlink, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &Netlink{h: h, links: map[string]netlink.Link{}, rt: -1}, nil
}

// Close releases the handle.
func (n *Netlink) Close() {
	n.h.Close()
	if n.rt >= 0 {
		unix.Close(n.rt)
		n.rt = -1
	}
}

// ExecRoutes adds the routes of route operations in one exchange with
// the kernel: every message in one send, then every ack (a jailed launch
// adds about 66 routes, and a round trip each took 0.8-1.5 ms of it).
// The messages are the live updates' own (routeMsg). errs[i] is ops[i]'s
// failure, or nil.
func (n *Netlink) ExecRoutes(ops []Op) []error {
	errs := make([]error, len(ops))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if n.rt < 0 {
		fd, err := openRtnetlink()
		if err != nil {
			return fail(err)
		}
		n.rt = fd
	}
	link := func(name string) (uint32, bool) {
		l, err := n.link(name)
		if err != nil {
			return 0, false
		}
		return uint32(l.Attrs().Index), true
	}
	var buf []byte
	pending := map[uint32]int{}
	for i, op := range ops {
		msg, err := routeMsg(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, op, n.seq+1, link)
		if err != nil {
			errs[i] = err
			continue
		}
		n.seq++
		pending[n.seq] = i
		buf = append(buf, msg...)
	}
	if len(pending) == 0 {
		return errs
	}
	drain(n.rt)
	if err := unix.Sendto(n.rt, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail(err)
	}
	err := awaitAcks(n.rt, func(seq uint32, e error) {
		if i, ok := pending[seq]; ok {
			errs[i] = e
			delete(pending, seq)
		}
	}, func() bool { return len(pending) == 0 })
	for _, i := range pending {
		errs[i] = err // unanswered
	}
	return errs
}

// link returns the named link. The index it carries stays valid: links
// are only configured here, never re-created.
func (n *Netlink) link(name string) (netlink.Link, error) {
	if l, ok := n.links[name]; ok {
		return l, nil
	}
	l, err := n.h.LinkByName(name)
	if err != nil {
		return nil, err
	}
	n.links[name] = l
	return l, nil
}

// Exec performs one operation.
func (n *Netlink) Exec(op Op) error {
	switch op.Kind {
	case OpLinkUp:
		l, err := n.link(op.Link)
		if err != nil {
			return err
		}
		return n.h.LinkSetUp(l)
	case OpLinkConfig:
		l, err := n.link(op.Link)
		if err != nil {
			return err
		}
		if err := n.h.LinkSetMTU(l, op.MTU); err != nil {
			return fmt.Errorf("mtu: %w", err)
		}
		if err := n.h.LinkSetTxQLen(l, op.TxQueueLen); err != nil {
			return fmt.Errorf("txqueuelen: %w", err)
		}
		// No link-local address means no fe80::/64 route that would be
		// more specific than the fe80::/10 blackhole. Fails when IPv6 is
		// off in the namespace, which is then harmless.
		if err := n.h.LinkSetIP6AddrGenMode(l, addrGenModeNone); err != nil && !ipv6Off() {
			return fmt.Errorf("addrgenmode: %w", err)
		}
		return nil
	case OpAddrAdd:
		l, err := n.link(op.Link)
		if err != nil {
			return err
		}
		return n.h.AddrAdd(l, netlinkAddr(op.Prefix))
	default:
		r, err := n.routeOf(op)
		if err != nil {
			return err
		}
		return n.h.RouteAdd(r)
	}
}

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE.
const addrGenModeNone = 1

func ipv6Off() bool {
	b, err := readFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err != nil || (len(b) > 0 && b[0] == '1')
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// netlinkAddr is the address for OpAddrAdd: no prefix route, no DAD (a TUN
// has no neighbours, and a tentative address would delay the first
// connection).
func netlinkAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: ipNet(p), Flags: unix.IFA_F_NOPREFIXROUTE | unix.IFA_F_NODAD}
}

// netlinkRoute maps a route operation to a netlink route; linkIndex is the
// TUN's index for routes via the TUN.
func netlinkRoute(op Op, linkIndex int) (*netlink.Route, error) {
	if !op.Prefix.IsValid() {
		return nil, fmt.Errorf("invalid destination %v", op.Prefix)
	}
	r := &netlink.Route{Dst: ipNet(op.Prefix), Family: unix.AF_INET}
	if op.Prefix.Addr().Is6() {
		r.Family = unix.AF_INET6
	}
	switch op.Kind {
	case OpDefault, OpPunch, OpSink:
		if linkIndex <= 0 {
			return nil, fmt.Errorf("no link for %v", op.Prefix)
		}
		r.Type = unix.RTN_UNICAST
		r.LinkIndex = linkIndex
		// As ip(8) does for a route without a gateway.
		r.Scope = netlink.SCOPE_LINK
	default:
		return nil, fmt.Errorf("not a route operation: %v", op.Kind)
	}
	return r, nil
}

// routeOf builds the netlink route of a route operation.
func (n *Netlink) routeOf(op Op) (*netlink.Route, error) {
	idx := 0
	if op.isRoute() {
		l, err := n.link(op.Link)
		if err != nil {
			return nil, err
		}
		idx = l.Attrs().Index
	}
	return netlinkRoute(op, idx)
}

// replace installs a route operation in place of the route with the same
// destination.
func (n *Netlink) replace(op Op) error {
	r, err := n.routeOf(op)
	if err != nil {
		return err
	}
	return n.h.RouteReplace(r)
}

// delete removes the route a route operation added.
func (n *Netlink) delete(op Op) error {
	r, err := n.routeOf(op)
	if err != nil {
		return err
	}
	return n.h.RouteDel(r)
}
