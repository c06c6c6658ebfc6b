package routes

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Netlink is the production [Executor]: it applies operations with a
// route netlink socket opened in the network namespace that was current
// when [OpenNetlink] was called, through the package's own rtnetlink
// messages.
type Netlink struct {
	links map[string]uint32 // link indexes by name: one lookup per link, not per route
	rt    int               // the rtnetlink socket
	rb    []byte            // its receive buffer, kept across requests
	seq   uint32
}

// OpenNetlink opens a route netlink socket in the calling thread's
// current network namespace. Call it inside the jail's namespace.
func OpenNetlink() (*Netlink, error) {
	fd, err := openRtnetlink()
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return &Netlink{links: map[string]uint32{}, rt: fd, rb: make([]byte, rtnlBufSize)}, nil
}

// Close releases the socket.
func (n *Netlink) Close() {
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
		return fail(errors.New("netlink socket closed"))
	}
	link := func(name string) (uint32, bool) {
		idx, err := n.link(name)
		return idx, err == nil
	}
	// Message n.seq+1+k is ops[sent[k]]; answered counts the acks.
	buf := make([]byte, 0, len(ops)*routeMsgMax)
	sent := make([]int, 0, len(ops))
	first := n.seq + 1
	for i, op := range ops {
		var err error
		if buf, err = appendRouteMsg(buf, unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, op, n.seq+1, link); err != nil {
			errs[i] = err
			continue
		}
		n.seq++
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return errs
	}
	drain(n.rt)
	if err := unix.Sendto(n.rt, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail(err)
	}
	answered := make([]bool, len(sent))
	left := len(sent)
	err := awaitAcks(n.rt, n.rb, func(seq uint32, e error) {
		if k := seq - first; seq >= first && k < uint32(len(sent)) && !answered[k] {
			answered[k] = true
			errs[sent[k]] = e
			left--
		}
	}, func() bool { return left == 0 })
	for k, i := range sent {
		if !answered[k] {
			errs[i] = err // unanswered
		}
	}
	return errs
}

// link returns the named link's index (one SIOCGIFINDEX). The index
// stays valid: links are only configured here, never re-created.
func (n *Netlink) link(name string) (uint32, error) {
	if idx, ok := n.links[name]; ok {
		return idx, nil
	}
	idx, err := linkIndex(name)
	if err != nil {
		return 0, err
	}
	n.links[name] = idx
	return idx, nil
}

// send sends msg, which must be numbered n.seq+1, and waits for its ack.
func (n *Netlink) send(msg []byte) error {
	if n.rt < 0 {
		return errors.New("netlink socket closed")
	}
	n.seq++
	return request(n.rt, n.rb, msg, n.seq)
}

// Exec performs one operation.
func (n *Netlink) Exec(op Op) error {
	switch op.Kind {
	case OpLinkUp:
		idx, err := n.link(op.Link)
		if err != nil {
			return err
		}
		return n.send(linkUpMsg(idx, n.seq+1))
	case OpLinkConfig:
		idx, err := n.link(op.Link)
		if err != nil {
			return err
		}
		if err := n.send(linkConfigMsg(idx, op.MTU, op.TxQueueLen, n.seq+1)); err != nil {
			return fmt.Errorf("mtu and txqueuelen: %w", err)
		}
		// No link-local address means no fe80::/64 route that would be
		// more specific than the fe80::/10 blackhole. Fails when IPv6 is
		// off in the namespace, which is then harmless.
		if err := n.send(addrGenModeMsg(idx, addrGenModeNone, n.seq+1)); err != nil && !ipv6Off() {
			return fmt.Errorf("addrgenmode: %w", err)
		}
		return nil
	case OpAddrAdd:
		idx, err := n.link(op.Link)
		if err != nil {
			return err
		}
		msg, err := addrMsg(idx, op.Prefix, n.seq+1)
		if err != nil {
			return err
		}
		return n.send(msg)
	default:
		return n.route(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, op)
	}
}

// route sends the route message of op (routeMsg) and waits for its ack.
func (n *Netlink) route(typ, flags uint16, op Op) error {
	msg, err := routeMsg(typ, flags, op, n.seq+1, func(name string) (uint32, bool) {
		idx, err := n.link(name)
		return idx, err == nil
	})
	if err != nil {
		return err
	}
	return n.send(msg)
}

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE.
const addrGenModeNone = 1

func ipv6Off() bool {
	b, err := readFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err != nil || (len(b) > 0 && b[0] == '1')
}

// replace installs a route operation in place of the route with the same
// destination.
func (n *Netlink) replace(op Op) error {
	return n.route(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, op)
}

// delete removes the route a route operation added.
func (n *Netlink) delete(op Op) error { return n.route(unix.RTM_DELROUTE, 0, op) }
