package netchild

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TUNFixes is appended to every TUN failure: how to get the device, and
// the documented way to run without the jail. The jail never falls back to
// open egress by itself.
const TUNFixes = "run without the egress jail only on purpose: --net=host (for the Claude shadow: CLAUDE_SANDBOX_EGRESS_JAIL=0)"

// Link is a TUN link the jail wants.
type Link struct {
	Name string `json:"name"`
	// Offload opens it with IFF_VNET_HDR: every packet carries a
	// virtio-net header, so checksums and segmentation can be left to the
	// kernel (TUNSETOFFLOAD: checksum, TSO for IPv4 and IPv6).
	Offload bool `json:"offload,omitempty"`
}

// VnetHdrLen is the size of the virtio-net header on an Offload link.
const VnetHdrLen = 10

// openTUN creates the TUN link in the current network namespace and
// returns its fd (no packet-information header: IP packets, preceded by a
// virtio-net header when Offload).
func openTUN(dev Link) (int, error) {
	name := dev.Name
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
			return -1, fmt.Errorf("egress jail: /dev/net/tun is missing (%w): load the module (modprobe tun), or in a container pass the device (docker run --device=/dev/net/tun); or %s", err, TUNFixes)
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return -1, fmt.Errorf("egress jail: cannot open /dev/net/tun as uid %d (%w): most distributions ship it mode 0666 (chmod 0666 /dev/net/tun), or in a container pass it with --device=/dev/net/tun; or %s", os.Getuid(), err, TUNFixes)
		}
		return -1, fmt.Errorf("egress jail: open /dev/net/tun: %w; %s", err, TUNFixes)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if dev.Offload {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(ifr))); e != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("egress jail: create TUN link %s: %w; %s", name, e, TUNFixes)
	}
	if dev.Offload {
		hdr := VnetHdrLen
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, hdr); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("egress jail: TUN link %s: virtio-net header size: %w", name, err)
		}
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM|unix.TUN_F_TSO4|unix.TUN_F_TSO6); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("egress jail: TUN link %s: offloads: %w", name, err)
		}
	}
	// Persistent, so that closing the last descriptor does not unregister
	// the link there and then: that waits for an RCU grace period (about
	// 15 ms a link here, most of a jailed launch's time). The kernel
	// deletes the links with the namespace instead, in the background,
	// when the sandbox's last process is gone; a persistent TUN in a dying
	// namespace is deleted, never moved to the host's.
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETPERSIST, 1); e != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("egress jail: TUN link %s: %w", name, e)
	}
	return fd, nil
}
