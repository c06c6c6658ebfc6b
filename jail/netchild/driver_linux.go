// Package netchild is the child half of the egress jail's network driver
// (nsexec's NetChild): it runs in the engine's holder stage, inside the
// jail's new network namespace, and builds it: the TUN links, the routes,
// the filter, ping for the caller's group. It passes back the links and
// three netlink sockets opened there (routes, netfilter and socket
// diagnostics), through which
// the launcher's half (package jail's Jail) puts each new policy in force
// while the sandbox runs; the holder has nothing left to do once they are
// passed.
//
// It is a package of its own, apart from the launcher's half, so that it
// is registered early: it imports nothing of the userstack, and its init
// function, once it has registered the driver, runs a holder stage that
// nsexec/stageinit's early start left for it (nsexec.InitHeldEarly), so
// the holder need not wait for every other package's initialiser (and the
// userstack's, which it never uses) before main. nsexec/stageinit does not
// import it: init, which never uses the driver, starts before the
// driver's imports (net, the netlink package) are initialised.
package netchild

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/claude-sandbox/claude-sandbox/internal/flowowner"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/routes"
)

// Name is the name the jail's child driver is registered under in every
// binary that links this package.
const Name = "claude-sandbox/jail"

// WarnNoPing begins the warning that ping will not work inside (the jail
// could not allow ping sockets in its namespace); claude-sandbox's doctor
// and launch hints look for it.
const WarnNoPing = "egress jail: ping will not work inside"

func init() {
	nsexec.RegisterNetChild(Name, netChild{})
	nsexec.InitHeldEarly() // a holder stage left by nsexec/stageinit runs here
}

// Data is the child driver's input: the jail's route plan and the TUN
// links to create, the egress device first.
type Data struct {
	Routes  routes.Plan `json:"routes"`
	Devices []Link      `json:"devices"`
}

// Reply is what the child driver hands back beside its descriptors: the
// links' indexes in the jail's namespace.
type Reply struct {
	Links map[string]uint32 `json:"links"`
}

// The descriptors the child passes, in this order; Files is their count.
const (
	FileTUN = iota
	FileSink
	FileRoute
	FileNetfilter
	// FileDiag is a NETLINK_SOCK_DIAG socket opened in the jail's
	// namespace: the launcher finds the socket behind a flow through it
	// (package flowowner).
	FileDiag
	Files
)

type netChild struct{}

// Setup builds the jail's namespace: TUN links, then the route plan (lo
// up, TUN addressed and up, blocks to the sink, default route, punches;
// a punch that fails is a warning), then the filter. Any other failure
// fails the launch: the jail is fail-closed and nothing has run in it.
func (netChild) Setup(data []byte, warn func(string)) (files []*os.File, reply []byte, err error) {
	var d Data
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, nil, fmt.Errorf("egress jail: the child driver's data: %w", err)
	}
	if len(d.Devices) == 0 {
		return nil, nil, errors.New("egress jail: no TUN device to create")
	}
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	for _, dev := range d.Devices {
		fd, err := openTUN(dev)
		if err != nil {
			return files, nil, err
		}
		files = append(files, os.NewFile(uintptr(fd), dev.Name))
	}
	nl, err := routes.OpenNetlink()
	if err != nil {
		return files, nil, err
	}
	defer nl.Close()
	warnings, err := routes.Apply(d.Routes, nl)
	for _, w := range warnings {
		warn(fmt.Sprintf("egress jail: %v (that destination stays unreachable)", w))
	}
	if err != nil {
		return files, nil, fmt.Errorf("egress jail: %w (the jail is fail-closed; nothing was started)", err)
	}
	if f := d.Routes.Filter; f != nil {
		err := routes.InstallFilter(f)
		if errors.Is(err, routes.ErrUnrecorded) {
			warn("egress jail: " + err.Error())
			err = nil
		}
		if err != nil {
			return files, nil, fmt.Errorf("egress jail: %w (the kernel's netfilter (nf_tables) must be available in the jail's network namespace: load the nf_tables module, or use --net=host to run without the jail)", err)
		}
	}
	// Unprivileged ICMP echo (ping sockets) is off in a new namespace;
	// allow it for the caller's group, so ping works without a raw socket.
	gid := os.Getgid()
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(fmt.Sprintf("%d %d", gid, gid)), 0); err != nil {
		warn(fmt.Sprintf(WarnNoPing+" (%v)", err))
	}
	names := make([]string, len(d.Devices))
	for i, dev := range d.Devices {
		names[i] = dev.Name
	}
	socks, err := routes.OpenSockets(names...)
	if err != nil {
		return files, nil, fmt.Errorf("egress jail: open the jail's netlink sockets: %w", err)
	}
	files = append(files, socks.Route, socks.Netfilter)
	diag, err := flowowner.OpenDiag()
	if err != nil {
		return files, nil, fmt.Errorf("egress jail: open the jail's socket diagnostics: %w", err)
	}
	files = append(files, os.NewFile(uintptr(diag), "sock_diag"))
	reply, err = json.Marshal(Reply{Links: socks.Links})
	return files, reply, err
}
