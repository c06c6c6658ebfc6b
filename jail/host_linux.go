package jail

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

type netipAddr = netip.Addr

// DiscoverHost reads the facts of the current network namespace and the
// resolv.conf at path.
func DiscoverHost(resolvConf string) (HostFacts, error) {
	var f HostFacts
	ifs, err := net.Interfaces()
	if err != nil {
		return f, err
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			addr, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			f.Connected = append(f.Connected, netip.PrefixFrom(addr.Unmap(), ones).Masked())
		}
	}
	if rf, err := os.Open(resolvConf); err == nil {
		f.ResolvConf, _ = ReadResolvConf(rf)
		rf.Close()
	}
	f.IPv6Egress = hasIPv6Default()
	return f, nil
}

// hasIPv6Default reports an IPv6 default route on a non-loopback device
// (from /proc/net/ipv6_route: destination ::/0).
func hasIPv6Default() bool {
	fh, err := os.Open("/proc/net/ipv6_route")
	if err != nil {
		return false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		if f[0] == strings.Repeat("0", 32) && f[1] == "00" && f[9] != "lo" {
			// RTF_REJECT (0x0200) marks unreachable routes.
			if flags, err := strconv.ParseUint(f[8], 16, 32); err == nil && flags&0x200 == 0 {
				return true
			}
		}
	}
	return false
}

// dupNonblock duplicates f as a non-blocking descriptor, for the sink:
// its reads go through Go's poller, so Close interrupts a pending Read.
func dupNonblock(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "tun"), nil
}
