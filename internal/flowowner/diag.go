// Package flowowner finds the process behind a flow of the sandbox: the
// socket's inode from the kernel's socket diagnostics (NETLINK_SOCK_DIAG,
// inet_diag, asked in the jail's network namespace through a socket the
// jail's child driver opened there), then the process holding that socket
// from a /proc of the sandbox's PID namespace (its pid, argv and working
// directory). The request encoding, the reply decoding and the /proc scan
// are here, apart from the jail, so that each can be tested (the reply
// decoder fuzzed) on its own.
//
// Everything read back is hostile input: the sockets and processes are
// the sandbox's. Replies are parsed with every length checked; argv and
// the working directory are bounded and escaped (no control character,
// no invalid UTF-8 reaches a terminal or a log).
package flowowner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sizes of the inet_diag messages (linux/inet_diag.h).
const (
	nlmsgHdrLen  = 16
	sockIDLen    = 48
	reqLen       = 8 + sockIDLen      // struct inet_diag_req_v2
	msgLen       = 4 + sockIDLen + 20 // struct inet_diag_msg
	allStates    = 0xffffffff
	sockDiagType = 20 // SOCK_DIAG_BY_FAMILY
)

// Sock is one socket of an inet_diag reply.
type Sock struct {
	Family uint8
	State  uint8
	Local  netip.AddrPort
	Remote netip.AddrPort
	UID    uint32
	Inode  uint32
}

// liveTCP are the TCP states a flow's socket with an owner may be in:
// not TIME_WAIT (no process holds it; a busy sandbox has thousands),
// not LISTEN or SYN_RECV (not a flow out).
const liveTCP = 1<<1 | 1<<2 | 1<<4 | 1<<5 | 1<<7 | 1<<8 | 1<<9 | 1<<11 // ESTABLISHED SYN_SENT FIN_WAIT1 FIN_WAIT2 CLOSE CLOSE_WAIT LAST_ACK CLOSING

// EncodeRequest returns a dump request (NLM_F_REQUEST|NLM_F_DUMP) for
// the sockets of protocol proto (unix.IPPROTO_TCP, IPPROTO_UDP) and
// family (AF_INET, AF_INET6) in the given states (a bit each: 1<<state),
// with sequence number seq.
func EncodeRequest(family, proto uint8, states uint32, seq uint32) []byte {
	return encode(family, proto, states, seq, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, netip.AddrPort{}, netip.AddrPort{})
}

// EncodeExact returns a request for the one socket of protocol proto
// whose local end is src and remote end dst, both of family (AF_INET:
// IPv4 addresses; AF_INET6: IPv6, an IPv4 one given v4-mapped). The
// kernel looks it up in its hash tables: no dump.
func EncodeExact(family, proto uint8, src, dst netip.AddrPort, seq uint32) []byte {
	return encode(family, proto, allStates, seq, unix.NLM_F_REQUEST, src, dst)
}

func encode(family, proto uint8, states, seq uint32, flags uint16, src, dst netip.AddrPort) []byte {
	b := make([]byte, nlmsgHdrLen+reqLen)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], sockDiagType)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	r := b[nlmsgHdrLen:]
	r[0], r[1] = family, proto
	binary.NativeEndian.PutUint32(r[4:], states)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	put := func(at []byte, a netip.Addr) {
		if !a.IsValid() {
			return
		}
		if family == unix.AF_INET6 {
			a16 := a.As16()
			copy(at, a16[:])
			return
		}
		a4 := a.Unmap().As4()
		copy(at, a4[:])
	}
	put(id[4:20], src.Addr())
	put(id[20:36], dst.Addr())
	// No cookie.
	binary.NativeEndian.PutUint32(id[40:], ^uint32(0))
	binary.NativeEndian.PutUint32(id[44:], ^uint32(0))
	return b
}

// ErrTruncated is a reply that ends inside a message.
var ErrTruncated = errors.New("sock_diag: truncated reply")

// DecodeReply parses one datagram of a dump's reply for sequence seq:
// the sockets it holds, and whether the dump is done (NLMSG_DONE). An
// NLMSG_ERROR is returned as an error; messages of another sequence are
// skipped.
func DecodeReply(b []byte, seq uint32) (socks []Sock, done bool, err error) {
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return socks, false, ErrTruncated
		}
		l := binary.NativeEndian.Uint32(b[0:])
		typ := binary.NativeEndian.Uint16(b[4:])
		s := binary.NativeEndian.Uint32(b[8:])
		if l < nlmsgHdrLen || uint64(l) > uint64(len(b)) {
			return socks, false, ErrTruncated
		}
		body := b[nlmsgHdrLen:l]
		// Messages are aligned to 4 bytes.
		next := (uint64(l) + 3) &^ 3
		if next > uint64(len(b)) {
			next = uint64(len(b))
		}
		b = b[next:]
		if s != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_DONE:
			return socks, true, nil
		case unix.NLMSG_ERROR:
			if len(body) < 4 {
				return socks, false, ErrTruncated
			}
			errno := int32(binary.NativeEndian.Uint32(body))
			if errno == 0 {
				continue
			}
			return socks, false, fmt.Errorf("sock_diag: %w", unix.Errno(-errno))
		case sockDiagType:
			sk, ok := decodeMsg(body)
			if !ok {
				return socks, false, ErrTruncated
			}
			socks = append(socks, sk)
		}
	}
	return socks, false, nil
}

// decodeMsg parses a struct inet_diag_msg (its attributes ignored).
func decodeMsg(m []byte) (Sock, bool) {
	if len(m) < msgLen {
		return Sock{}, false
	}
	sk := Sock{Family: m[0], State: m[1]}
	id := m[4 : 4+sockIDLen]
	sport := binary.BigEndian.Uint16(id[0:])
	dport := binary.BigEndian.Uint16(id[2:])
	addr := func(a []byte) netip.Addr {
		if sk.Family == unix.AF_INET6 {
			return netip.AddrFrom16([16]byte(a[:16])).Unmap()
		}
		return netip.AddrFrom4([4]byte(a[:4]))
	}
	if sk.Family != unix.AF_INET && sk.Family != unix.AF_INET6 {
		return Sock{}, false
	}
	sk.Local = netip.AddrPortFrom(addr(id[4:20]), sport)
	sk.Remote = netip.AddrPortFrom(addr(id[20:36]), dport)
	rest := m[4+sockIDLen:]
	sk.UID = binary.NativeEndian.Uint32(rest[12:])
	sk.Inode = binary.NativeEndian.Uint32(rest[16:])
	return sk, true
}

// Match picks the socket of a flow from src (the sandbox's end; invalid:
// unknown) to dst among socks: its local end is src (or, for an
// unconnected UDP socket, bound to src's port on any address) and its
// remote end is dst (or none, for unconnected UDP). Without src, dst
// alone must name one socket. It returns 0 when none or more than one
// socket fits.
func Match(socks []Sock, udp bool, src, dst netip.AddrPort) uint32 {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	var exact, loose uint32
	nExact, nLoose := 0, 0
	for _, s := range socks {
		if s.Inode == 0 {
			continue
		}
		remoteOK := s.Remote == dst
		unconnected := udp && s.Remote.Port() == 0 && (!s.Remote.Addr().IsValid() || s.Remote.Addr().IsUnspecified())
		if src.IsValid() {
			if s.Local.Port() != src.Port() {
				continue
			}
			localExact := s.Local.Addr() == src.Addr()
			localAny := s.Local.Addr().IsUnspecified()
			switch {
			case localExact && remoteOK:
				exact, nExact = s.Inode, nExact+1
			case (localExact || localAny) && (remoteOK || unconnected):
				if loose != s.Inode {
					nLoose++
				}
				loose = s.Inode
			}
			continue
		}
		if remoteOK {
			if exact != s.Inode {
				nExact++
			}
			exact = s.Inode
		}
	}
	switch {
	case nExact == 1:
		return exact
	case nExact == 0 && nLoose == 1:
		return loose
	}
	return 0
}

// Diag asks the kernel's socket diagnostics through one NETLINK_SOCK_DIAG
// socket (opened in the namespace whose sockets it is to find). Safe for
// concurrent use: one question at a time.
type Diag struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	buf []byte
}

// NewDiag returns a Diag on fd, an open NETLINK_SOCK_DIAG socket, which
// it uses (and closes with Close).
func NewDiag(fd int) *Diag {
	tv := unix.NsecToTimeval(int64(time.Second))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &Diag{fd: fd}
}

// OpenDiag opens a NETLINK_SOCK_DIAG socket in the current network
// namespace.
func OpenDiag() (int, error) {
	return unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
}

// Close closes the socket; later lookups fail.
func (d *Diag) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// maxSocks bounds the sockets one dump may return (a sandbox holding
// more is not searched further).
const maxSocks = 1 << 16

// Dump returns the sockets of family and proto in states.
func (d *Diag) Dump(family, proto uint8, states uint32) ([]Sock, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return d.ask(EncodeRequest(family, proto, states, d.seq), d.seq, true)
}

// Exact returns the inode of the socket of proto from src to dst (0:
// none), looked up by the kernel (EncodeExact).
func (d *Diag) Exact(family, proto uint8, src, dst netip.AddrPort) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	socks, err := d.ask(EncodeExact(family, proto, src, dst, d.seq), d.seq, false)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil || len(socks) != 1 {
		return 0, err
	}
	return socks[0].Inode, nil
}

// ask sends req and reads its reply: until NLMSG_DONE for a dump, one
// datagram otherwise (d.mu held).
func (d *Diag) ask(req []byte, seq uint32, dump bool) ([]Sock, error) {
	if d.fd < 0 {
		return nil, errors.New("sock_diag: closed")
	}
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	if d.buf == nil {
		d.buf = make([]byte, 64<<10) // a dump's datagrams are at most 32 KiB
	}
	var all []Sock
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return all, err
		}
		socks, done, err := DecodeReply(d.buf[:n], seq)
		if len(all) < maxSocks {
			all = append(all, socks...)
		}
		if err != nil || done || !dump {
			return all, err
		}
	}
}

// Find returns the inode of the socket of a flow of proto ("tcp" or
// "udp") from src to dst, asking both families for an IPv4 flow (an
// IPv6 socket may carry it, v4-mapped): a TCP flow with its source
// known by the kernel's lookup in its hash tables; otherwise a dump of
// the protocol's sockets (TCP's in the states a flow with an owner may
// be in) matched here (Match).
func (d *Diag) Find(proto string, src, dst netip.AddrPort) (uint32, error) {
	var p uint8
	switch proto {
	case "tcp":
		p = unix.IPPROTO_TCP
	case "udp":
		p = unix.IPPROTO_UDP
	default:
		return 0, fmt.Errorf("sock_diag: no sockets of protocol %q", proto)
	}
	fams := []uint8{unix.AF_INET6}
	if dst.Addr().Unmap().Is4() {
		fams = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	for _, fam := range fams {
		if p == unix.IPPROTO_TCP && src.IsValid() {
			if fam == unix.AF_INET && !src.Addr().Unmap().Is4() {
				continue
			}
			ino, err := d.Exact(fam, p, src, dst)
			if err != nil || ino != 0 {
				return ino, err
			}
			continue
		}
		states := uint32(allStates)
		if p == unix.IPPROTO_TCP {
			states = liveTCP
		}
		socks, err := d.Dump(fam, p, states)
		if err != nil {
			return 0, err
		}
		if ino := Match(socks, p == unix.IPPROTO_UDP, src, dst); ino != 0 {
			return ino, nil
		}
	}
	return 0, nil
}
