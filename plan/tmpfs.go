package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"golang.org/x/sys/unix"
)

// MinTmpfsSize is the smallest tmpfs size a plan accepts (and the floor
// of the default share).
const MinTmpfsSize = 1 << 20

// TotalRAM reports the machine's RAM in bytes (0 when unknown). A variable
// so tests see a fixed machine.
var TotalRAM = func() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// DefaultTmpfsSize is the size each of n writable tmpfs mounts gets when
// none is asked for: together they hold at most a quarter of the RAM
// (each at least MinTmpfsSize). A tmpfs's pages are shared memory charged
// to no process, so without a bound a sandbox could fill the host's RAM
// (the kernel's default is half the RAM for each).
func DefaultTmpfsSize(n int) int64 {
	if n < 1 {
		n = 1
	}
	ram := TotalRAM()
	if ram == 0 {
		ram = 4 << 30
	}
	s := int64(ram / 4 / uint64(n))
	s &^= 1<<20 - 1 // whole MiB, for a readable plan
	if s < MinTmpfsSize {
		s = MinTmpfsSize
	}
	return s
}

// sizeTmpfs gives every writable tmpfs of p (Tmpfs, the /dev/shm of Dev,
// each Overlay's layer) the size asked for, or the default share.
func sizeTmpfs(p *Plan, asked int64) error {
	n := 0
	for _, op := range p.Mounts {
		if sized(op.Kind) {
			n++
		}
	}
	switch {
	case asked == 0:
		p.TmpfsSize = DefaultTmpfsSize(n)
	case asked < MinTmpfsSize:
		return errf("--tmpfs-size %d: use at least 1M", asked)
	default:
		p.TmpfsSize = asked
	}
	for i := range p.Mounts {
		if sized(p.Mounts[i].Kind) && p.Mounts[i].Size == 0 {
			p.Mounts[i].Size = p.TmpfsSize
		}
	}
	return nil
}

func sized(k mounts.Kind) bool { return k == mounts.Tmpfs || k == mounts.Dev || k == mounts.Overlay }

// ParseSize reads a size in bytes: a whole number with an optional
// binary suffix K, M, G or T (512M, 2G); KiB-style and lower case
// suffixes are read too.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(t), "B"), "I")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: use a number of bytes with an optional K, M, G or T suffix (512M)", s)
	}
	return v * mult, nil
}
