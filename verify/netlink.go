package verify

import (
	"net"

	"github.com/vishvananda/netlink"
)

func netlinkLinkByName(name string) (netlink.Link, error) { return netlink.LinkByName(name) }

func netlinkAddrList(l netlink.Link) ([]net.IP, error) {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	var out []net.IP
	for _, a := range addrs {
		out = append(out, a.IP)
	}
	return out, nil
}
