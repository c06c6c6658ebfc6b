package routes

import (
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update if intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

var baseCfg = Config{
	TUN:   "tun0",
	Sink:  "blk0",
	Addr4: netip.MustParsePrefix("10.255.255.2/32"),
	Addr6: netip.MustParsePrefix("fd7a:5a4e::2/128"),
}

// The plan the jail ships (a sink, IPv4 and IPv6), locked in as text.
func TestBuildPlanGolden(t *testing.T) {
	full := netpolicy.MustNew(netpolicy.Config{
		ConnectedSubnets: []netip.Prefix{
			netip.MustParsePrefix("172.23.0.0/16"),
			netip.MustParsePrefix("2001:db8:1::/64"),
		},
		Allow: []netip.Prefix{
			netip.MustParsePrefix("192.168.1.50/32"),
			netip.MustParsePrefix("10.42.0.0/16"),
			netip.MustParsePrefix("fd00:1::/64"),
		},
		DNSResolvers: []netip.Addr{
			netip.MustParseAddr("172.23.0.2"),
			netip.MustParseAddr("192.0.2.53"),
		},
	})
	p, err := BuildPlan(full, baseCfg)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "full-sink", p.String())
}

// TestPlanOrder checks the load-bearing order independently of the golden
// text: links before routes, every block before the default route, every
// punch after it, and only punches fail-soft.
func TestPlanOrder(t *testing.T) {
	pol := netpolicy.MustNew(netpolicy.Config{
		Allow:        []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
		DNSResolvers: []netip.Addr{netip.MustParseAddr("fd00::53")},
	})
	p, err := BuildPlan(pol, baseCfg)
	if err != nil {
		t.Fatal(err)
	}
	phase := func(k OpKind) int {
		switch k {
		case OpLinkUp, OpLinkConfig, OpAddrAdd:
			return 0
		case OpSink:
			return 1
		case OpDefault:
			return 2
		}
		return 3
	}
	last := 0
	var kinds = map[OpKind]int{}
	for i, op := range p.Ops {
		kinds[op.Kind]++
		if ph := phase(op.Kind); ph < last {
			t.Errorf("op %d %q out of order", i, op)
		} else {
			last = ph
		}
		if op.FailSoft() != (op.Kind == OpPunch) {
			t.Errorf("op %q FailSoft = %v", op, op.FailSoft())
		}
	}
	if p.Ops[0].String() != "link set lo up" || p.Ops[len(p.Ops)-1].Kind != OpPunch {
		t.Errorf("first %q, last %q", p.Ops[0], p.Ops[len(p.Ops)-1])
	}
	if kinds[OpDefault] != 2 || kinds[OpSink] != 25 || kinds[OpPunch] != 3 {
		t.Errorf("op counts %v", kinds)
	}
	// The TUN is up before routes via it; its addresses before it is up.
	var upAt, addrAt int
	for i, op := range p.Ops {
		if op.Kind == OpLinkUp && op.Link == "tun0" {
			upAt = i
		}
		if op.Kind == OpAddrAdd {
			addrAt = i
		}
	}
	if addrAt > upAt || upAt == 0 {
		t.Errorf("addresses at %d, tun up at %d", addrAt, upAt)
	}
}

func TestBuildPlanErrors(t *testing.T) {
	pol := netpolicy.MustNew(netpolicy.Config{})
	mod := func(f func(*Config)) Config { c := baseCfg; f(&c); return c }
	tests := []struct {
		name string
		pol  *netpolicy.Policy
		cfg  Config
		want string
	}{
		{"nil policy", nil, baseCfg, "no policy"},
		{"no sink", pol, mod(func(c *Config) { c.Sink = "" }), "invalid sink link name"},
		{"sink is the tun", pol, mod(func(c *Config) { c.Sink = c.TUN }), "invalid sink link name"},
		{"no tun", pol, mod(func(c *Config) { c.TUN = "" }), "invalid TUN link name"},
		{"long tun", pol, mod(func(c *Config) { c.TUN = "abcdefghijklmnop" }), "invalid TUN link name"},
		{"slash tun", pol, mod(func(c *Config) { c.TUN = "a/b" }), "invalid TUN link name"},
		{"small mtu", pol, mod(func(c *Config) { c.MTU = 576 }), "MTU 576 out of range"},
		{"big mtu", pol, mod(func(c *Config) { c.MTU = 65536 }), "MTU 65536 out of range"},
		{"negative qlen", pol, mod(func(c *Config) { c.TxQueueLen = -1 }), "negative txqueuelen"},
		{"no v4", pol, mod(func(c *Config) { c.Addr4 = netip.Prefix{} }), "IPv4 address must be a /32"},
		{"v4 subnet", pol, mod(func(c *Config) { c.Addr4 = netip.MustParsePrefix("10.255.255.2/24") }), "IPv4 address must be a /32"},
		{"v4 is v6", pol, mod(func(c *Config) { c.Addr4 = netip.MustParsePrefix("fd00::2/128") }), "IPv4 address must be a /32"},
		{"v6 subnet", pol, mod(func(c *Config) { c.Addr6 = netip.MustParsePrefix("fd00::2/64") }), "IPv6 address must be a /128"},
		{"v6 is v4", pol, mod(func(c *Config) { c.Addr6 = netip.MustParsePrefix("10.0.0.1/32") }), "IPv6 address must be a /128"},
		{"v6 mapped", pol, mod(func(c *Config) { c.Addr6 = netip.MustParsePrefix("::ffff:10.0.0.1/128") }), "IPv6 address must be a /128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildPlan(tt.pol, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("BuildPlan() error = %v, want containing %q", err, tt.want)
			}
		})
	}
}

// recorder is an Executor that records ops and fails chosen ones.
type recorder struct {
	ops  []string
	fail map[string]error
}

func (r *recorder) Exec(op Op) error {
	r.ops = append(r.ops, op.String())
	return r.fail[op.String()]
}

func TestApply(t *testing.T) {
	pol := netpolicy.MustNew(netpolicy.Config{
		Allow:        []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("10.9.0.0/16")},
		DNSResolvers: []netip.Addr{netip.MustParseAddr("172.23.0.2")},
	})
	plan, err := BuildPlan(pol, baseCfg)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]string, len(plan.Ops))
	for i, op := range plan.Ops {
		all[i] = op.String()
	}
	indexOf := func(s string) int {
		for i, o := range all {
			if o == s {
				return i
			}
		}
		t.Fatalf("no op %q in plan", s)
		return -1
	}
	eperm := syscall.EPERM
	tests := []struct {
		name      string
		fail      map[string]error
		wantErr   string // "" for success
		wantWarns []string
		wantRan   int // number of ops executed
	}{
		{"all succeed", nil, "", nil, len(all)},
		{"block fails closed",
			map[string]error{"route add 10.0.0.0/8 dev blk0": eperm},
			"route add 10.0.0.0/8 dev blk0: operation not permitted", nil,
			indexOf("route add 10.0.0.0/8 dev blk0") + 1},
		{"metadata block fails closed",
			map[string]error{"route add 169.254.0.0/16 dev blk0": eperm},
			"route add 169.254.0.0/16 dev blk0: operation not permitted", nil,
			indexOf("route add 169.254.0.0/16 dev blk0") + 1},
		{"sink link fails closed",
			map[string]error{"link set blk0 up": eperm},
			"link set blk0 up: operation not permitted", nil,
			indexOf("link set blk0 up") + 1},
		{"lo fails closed",
			map[string]error{"link set lo up": eperm},
			"link set lo up: operation not permitted", nil, 1},
		{"default route fails closed",
			map[string]error{"route add 0.0.0.0/0 dev tun0": eperm},
			"route add 0.0.0.0/0 dev tun0: operation not permitted", nil,
			indexOf("route add 0.0.0.0/0 dev tun0") + 1},
		{"punches fail soft",
			map[string]error{
				"route add 10.1.2.3/32 dev tun0":   syscall.EEXIST,
				"route add 172.23.0.2/32 dev tun0": eperm,
			},
			"", []string{
				"route add 10.1.2.3/32 dev tun0: file exists",
				"route add 172.23.0.2/32 dev tun0: operation not permitted",
			}, len(all)},
		{"warnings kept on a later error",
			map[string]error{
				"route add 10.1.2.3/32 dev tun0":  eperm,
				"route add 10.9.0.0/16 dev tun0x": eperm, // not in plan: never fails
				"link set tun0 up":                eperm,
			},
			"link set tun0 up: operation not permitted", nil, indexOf("link set tun0 up") + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{fail: tt.fail}
			warns, err := Apply(plan, r)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Fatalf("Apply() error = %v, want %q", err, tt.wantErr)
			}
			if err != nil {
				var oe *OpError
				if !errors.As(err, &oe) || !errors.Is(err, syscall.EPERM) {
					t.Errorf("error %v is not an *OpError wrapping the errno", err)
				}
			}
			var got []string
			for _, w := range warns {
				got = append(got, w.Error())
			}
			if strings.Join(got, "|") != strings.Join(tt.wantWarns, "|") {
				t.Errorf("warnings = %q, want %q", got, tt.wantWarns)
			}
			if len(r.ops) != tt.wantRan || strings.Join(r.ops, "\n") != strings.Join(all[:tt.wantRan], "\n") {
				t.Errorf("ran %d ops:\n%s\nwant the first %d of the plan", len(r.ops), strings.Join(r.ops, "\n"), tt.wantRan)
			}
		})
	}
}

func TestOpStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{OpKind(99).String(), "opkind(99)"},
		{Op{Kind: OpKind(99), Link: "x"}.String(), "opkind(99) x invalid Prefix"},
		{OpPunch.String(), "punch"},
		{OpLinkConfig.String(), "link-config"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	for k := OpLinkUp; k <= OpPunch; k++ {
		if strings.HasPrefix(k.String(), "opkind") {
			t.Errorf("kind %d has no name", k)
		}
	}
}

// Every block is a fail-closed route to the sink link, set up before any
// route uses it; nothing is punched to the sink.
func TestSinkPlan(t *testing.T) {
	cfg := baseCfg
	p, err := BuildPlan(netpolicy.MustNew(netpolicy.Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")}}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sinkUp := -1
	sinks := 0
	for i, op := range p.Ops {
		switch {
		case op.Kind == OpLinkUp && op.Link == "blk0":
			sinkUp = i
		case op.Kind == OpSink:
			sinks++
			if sinkUp < 0 || op.Link != "blk0" || op.FailSoft() {
				t.Errorf("op %d %q: sink route before the sink is up, or fail-soft", i, op)
			}
		case op.Kind == OpPunch && op.Link != cfg.TUN:
			t.Errorf("punch %q not via the TUN", op)
		}
	}
	if sinks < 10 {
		t.Errorf("%d sink routes, want every block", sinks)
	}
}
