package routes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// The netfilter table of the kernel layer, spoken over netlink directly
// (no nft or iptables binary; a few dozen lines of attribute encoding).
const (
	nftTable  = "claude_sandbox"
	nftChain  = "egress"
	nftRefuse = "refuse" // jumped to for a blocked destination
)

// ErrUnrecorded says the filter is installed but without its copies to
// the sink (the kernel lacks nft's dup expression): refusals of sockets
// bound to the TUN are not recorded. The filter itself holds.
var ErrUnrecorded = errors.New("the kernel has no nftables dup expression (nft_dup_ipv4/nft_dup_ipv6): refusals of sockets bound to the egress device are enforced but not recorded")

// InstallFilter installs f in the calling process's network namespace as
// one atomic netfilter transaction, replacing the rules of an earlier
// InstallFilter: the table and its output chain are created if missing and
// the chain's rules are flushed and written in the same batch, so no
// packet ever sees a half-written filter.
func InstallFilter(f *Filter) error {
	if f == nil {
		return errors.New("no filter")
	}
	oif, err := linkIndex(f.Dev)
	if err != nil {
		return fmt.Errorf("filter: %w", err)
	}
	var sink uint32
	if f.Sink != "" {
		if sink, err = linkIndex(f.Sink); err != nil {
			return fmt.Errorf("filter: %w", err)
		}
	}
	fd, err := openNetfilter()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var seq uint32
	return installFilterOn(fd, &seq, f, oif, sink)
}

// installFilterOn is InstallFilter over the netfilter socket fd, with the
// links' indexes known; seq numbers the messages across calls on fd.
func installFilterOn(fd int, seq *uint32, f *Filter, oif, sink uint32) error {
	err := sendBatch(fd, seq, filterBatch(f, oif, sink))
	if sink != 0 && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP)) {
		if err = sendBatch(fd, seq, filterBatch(f, oif, 0)); err == nil {
			return ErrUnrecorded
		}
	}
	return err
}

// openNetfilter opens a netfilter netlink socket in the current network
// namespace, bound, with a 5 s bound on each wait for the kernel.
func openNetfilter() (int, error) {
	return openNetlinkSocket(unix.NETLINK_NETFILTER, "filter: netfilter netlink socket", "filter: bind")
}

// sendBatch sends one netfilter transaction on fd and waits for every
// answer. Answers left over from an earlier batch on the same socket (one
// the kernel aborted) are drained first and, by their sequence numbers,
// never taken for this batch's.
func sendBatch(fd int, seq *uint32, msgs []nfMsg) error {
	drain(fd)
	first := *seq + 1
	// One buffer of the batch's length: grown message by message, its
	// copies were about a dozen of the holder's page faults (issue 33).
	n := 0
	for _, m := range msgs {
		n += m.len()
	}
	buf := make([]byte, 0, n)
	for _, m := range msgs {
		*seq++
		buf = m.appendTo(buf, *seq)
	}
	if err := unix.Sendto(fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("filter: send: %w", err)
	}
	// Every message but the batch's begin and end asks for an ack; the
	// first error aborts the whole batch in the kernel.
	want := len(msgs) - 2
	rb := make([]byte, 1<<16)
	for want > 0 {
		n, _, err := unix.Recvfrom(fd, rb, 0)
		if err == unix.EINTR {
			// Under SO_RCVTIMEO a signal (the runtime's preemption,
			// a stage's SIGCHLD) ends the wait instead of
			// restarting it: wait again.
			continue
		}
		if err != nil {
			return fmt.Errorf("filter: waiting for the kernel's answer: %w", err)
		}
		nms, err := syscallParse(rb[:n])
		if err != nil {
			return fmt.Errorf("filter: %w", err)
		}
		for _, m := range nms {
			if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq < first || m.Header.Seq > *seq {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("filter: short netlink error")
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				return fmt.Errorf("filter: netfilter refused the table: %w", unix.Errno(-code))
			}
			want--
		}
	}
	return nil
}

// drain discards what is queued on the netlink socket fd.
func drain(fd int) {
	// A read shorter than a datagram still takes all of it off the
	// socket. (A 64 KiB buffer here lived on the stack: the first call
	// of a goroutine grew its stack to 128 KiB, issue 33.)
	var b [16]byte
	for {
		if _, _, err := unix.Recvfrom(fd, b[:], unix.MSG_DONTWAIT|unix.MSG_TRUNC); err != nil && err != unix.EINTR {
			return
		}
	}
}

// nfMsg is one netfilter netlink message.
type nfMsg struct {
	typ    uint16
	flags  uint16
	family uint8
	resID  uint16
	attrs  []byte
}

// len is the length of the encoded message.
func (m nfMsg) len() int { return unix.NLMSG_HDRLEN + 4 + len(m.attrs) }

// appendTo appends the message, numbered seq, to b.
func (m nfMsg) appendTo(b []byte, seq uint32) []byte {
	b = binary.NativeEndian.AppendUint32(b, uint32(m.len()))
	b = binary.NativeEndian.AppendUint16(b, m.typ)
	b = binary.NativeEndian.AppendUint16(b, m.flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, m.family, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, m.resID)
	return append(b, m.attrs...)
}

// attr encodes one netlink attribute, padded to 4 bytes.
func attr(typ uint16, val []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(val)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func nested(typ uint16, children ...[]byte) []byte {
	var v []byte
	for _, c := range children {
		v = append(v, c...)
	}
	return attr(typ|unix.NLA_F_NESTED, v)
}

func str(typ uint16, s string) []byte { return attr(typ, append([]byte(s), 0)) }
func be32(typ uint16, v uint32) []byte {
	return attr(typ, binary.BigEndian.AppendUint32(nil, v))
}

// expr is one rule expression: its name and its attributes.
func expr(name string, data ...[]byte) []byte {
	return nested(unix.NFTA_LIST_ELEM, str(unix.NFTA_EXPR_NAME, name), nested(unix.NFTA_EXPR_DATA, data...))
}

func metaLoad(key uint32) []byte {
	return expr("meta", be32(unix.NFTA_META_KEY, key), be32(unix.NFTA_META_DREG, unix.NFT_REG_1))
}

func cmp(op uint32, val []byte) []byte {
	return expr("cmp", be32(unix.NFTA_CMP_SREG, unix.NFT_REG_1), be32(unix.NFTA_CMP_OP, op), nested(unix.NFTA_CMP_DATA, attr(unix.NFTA_DATA_VALUE, val)))
}

func payload(base, offset, length uint32) []byte {
	return expr("payload", be32(unix.NFTA_PAYLOAD_DREG, unix.NFT_REG_1), be32(unix.NFTA_PAYLOAD_BASE, base), be32(unix.NFTA_PAYLOAD_OFFSET, offset), be32(unix.NFTA_PAYLOAD_LEN, length))
}

func inRange(from, to []byte) []byte {
	return expr("range", be32(unix.NFTA_RANGE_SREG, unix.NFT_REG_1), be32(unix.NFTA_RANGE_OP, unix.NFT_RANGE_EQ),
		nested(unix.NFTA_RANGE_FROM_DATA, attr(unix.NFTA_DATA_VALUE, from)), nested(unix.NFTA_RANGE_TO_DATA, attr(unix.NFTA_DATA_VALUE, to)))
}

func verdict(code uint32) []byte {
	return expr("immediate", be32(unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_VERDICT),
		nested(unix.NFTA_IMMEDIATE_DATA, nested(unix.NFTA_DATA_VERDICT, be32(unix.NFTA_VERDICT_CODE, code))))
}

func jump(chain string) []byte {
	return expr("immediate", be32(unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_VERDICT),
		nested(unix.NFTA_IMMEDIATE_DATA, nested(unix.NFTA_DATA_VERDICT, be32(unix.NFTA_VERDICT_CODE, uint32(0xffffffff+1+int64(unix.NFT_JUMP))), str(unix.NFTA_VERDICT_CHAIN, chain))))
}

// filterBatch is the transaction that (re)installs f: one table per
// family (the dup expression exists per family only, not in inet tables);
// oif is the egress device's index, sink the sink's (0: no copies to it).
func filterBatch(f *Filter, oif, sink uint32) []nfMsg {
	msgs := []nfMsg{{typ: unix.NFNL_MSG_BATCH_BEGIN, flags: unix.NLM_F_REQUEST, resID: unix.NFNL_SUBSYS_NFTABLES}}
	for _, fam := range []uint8{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
		msgs = append(msgs, familyTable(f, fam, oif, sink)...)
	}
	return append(msgs, nfMsg{typ: unix.NFNL_MSG_BATCH_END, flags: unix.NLM_F_REQUEST, resID: unix.NFNL_SUBSYS_NFTABLES})
}

// familyTable is the table of one family (NFPROTO_IPV4 or NFPROTO_IPV6):
//
//	chain egress (output hook): oif != TUN accept; DNS punches accept;
//	                            each blocked range of the family: jump refuse
//	chain refuse:               a copy to the sink (recorded there);
//	                            TCP: reject with a reset; drop
func familyTable(f *Filter, fam uint8, oif, sink uint32) []nfMsg {
	const create = unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE
	nft := func(t uint16) uint16 { return unix.NFNL_SUBSYS_NFTABLES<<8 | t }
	v6 := fam == unix.NFPROTO_IPV6
	daddrAt, daddrLen := uint32(16), uint32(4)
	if v6 {
		daddrAt, daddrLen = 24, 16
	}
	msgs := []nfMsg{
		{typ: nft(unix.NFT_MSG_NEWTABLE), flags: create, family: fam, attrs: str(unix.NFTA_TABLE_NAME, nftTable)},
		{typ: nft(unix.NFT_MSG_NEWCHAIN), flags: create, family: fam, attrs: concat(
			str(unix.NFTA_CHAIN_TABLE, nftTable), str(unix.NFTA_CHAIN_NAME, nftChain),
			nested(unix.NFTA_CHAIN_HOOK, be32(unix.NFTA_HOOK_HOOKNUM, unix.NF_INET_LOCAL_OUT), be32(unix.NFTA_HOOK_PRIORITY, 0)),
			be32(unix.NFTA_CHAIN_POLICY, nfAccept), str(unix.NFTA_CHAIN_TYPE, "filter"))},
		{typ: nft(unix.NFT_MSG_NEWCHAIN), flags: create, family: fam, attrs: concat(
			str(unix.NFTA_CHAIN_TABLE, nftTable), str(unix.NFTA_CHAIN_NAME, nftRefuse))},
	}
	// Flush both chains: a DELRULE naming only table and chain.
	for _, c := range []string{nftChain, nftRefuse} {
		msgs = append(msgs, nfMsg{typ: nft(unix.NFT_MSG_DELRULE), flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK, family: fam, attrs: concat(
			str(unix.NFTA_RULE_TABLE, nftTable), str(unix.NFTA_RULE_CHAIN, c))})
	}
	ruleIn := func(chain string, exprs ...[]byte) nfMsg {
		return nfMsg{typ: nft(unix.NFT_MSG_NEWRULE), flags: create | unix.NLM_F_APPEND, family: fam, attrs: concat(
			str(unix.NFTA_RULE_TABLE, nftTable), str(unix.NFTA_RULE_CHAIN, chain), nested(unix.NFTA_RULE_EXPRESSIONS, exprs...))}
	}
	native32 := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	// The refusal. First a copy of the packet to the sink, which records
	// it as it records what the routes send there (and answers it too).
	// Then a TCP segment is answered with a reset (connect fails at once
	// with ECONNREFUSED; a dropped SYN would only be retried until the
	// caller gives up), and anything else is dropped (its send fails at
	// once with EPERM).
	if sink != 0 {
		msgs = append(msgs, ruleIn(nftRefuse,
			payload(unix.NFT_PAYLOAD_NETWORK_HEADER, daddrAt, daddrLen),
			expr("immediate", be32(unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_2), nested(unix.NFTA_IMMEDIATE_DATA, attr(unix.NFTA_DATA_VALUE, native32(sink)))),
			expr("dup", be32(unix.NFTA_DUP_SREG_ADDR, unix.NFT_REG_1), be32(unix.NFTA_DUP_SREG_DEV, unix.NFT_REG_2))))
	}
	msgs = append(msgs,
		ruleIn(nftRefuse, metaLoad(unix.NFT_META_L4PROTO), cmp(unix.NFT_CMP_EQ, []byte{unix.IPPROTO_TCP}),
			expr("reject", be32(unix.NFTA_REJECT_TYPE, unix.NFT_REJECT_TCP_RST))),
		ruleIn(nftRefuse, verdict(nfDrop)),
		ruleIn(nftChain, metaLoad(unix.NFT_META_OIF), cmp(unix.NFT_CMP_NEQ, native32(oif)), verdict(nfAccept)))
	for _, a := range f.DNS {
		if a.Is6() != v6 {
			continue
		}
		for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			msgs = append(msgs, ruleIn(nftChain,
				payload(unix.NFT_PAYLOAD_NETWORK_HEADER, daddrAt, daddrLen), cmp(unix.NFT_CMP_EQ, a.AsSlice()),
				metaLoad(unix.NFT_META_L4PROTO), cmp(unix.NFT_CMP_EQ, []byte{proto}),
				payload(unix.NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2), cmp(unix.NFT_CMP_EQ, []byte{0, 53}), verdict(nfAccept)))
		}
	}
	for _, r := range f.Block {
		if r.From.Is6() != v6 {
			continue
		}
		msgs = append(msgs, ruleIn(nftChain, payload(unix.NFT_PAYLOAD_NETWORK_HEADER, daddrAt, daddrLen),
			inRange(r.From.AsSlice(), r.To.AsSlice()), jump(nftRefuse)))
	}
	return msgs
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func syscallParse(b []byte) ([]syscall.NetlinkMessage, error) { return syscall.ParseNetlinkMessage(b) }

// Netfilter verdicts (linux/netfilter.h).
const (
	nfDrop   = 0
	nfAccept = 1
)
