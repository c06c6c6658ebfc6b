package shadow

import (
	"fmt"
	"path"
	"path/filepath"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// devicePattern validates an allow-device value: an absolute path or glob
// (/dev/nvidia*, /dev/dri/*).
func devicePattern(v string) (string, error) {
	p, err := absPath(v)
	if err != nil {
		return "", err
	}
	if _, err := path.Match(p, ""); err != nil {
		return "", fmt.Errorf("%q is not a valid glob (%v)", v, err)
	}
	return p, nil
}

// deviceOps expands the allow-device patterns on the host, at launch: each
// match is a --dev-bind-try of itself (a node gone by the time the mount is
// made is skipped; plan.Build refuses a match that is not a device node or
// a directory below /dev). A pattern that matches nothing adds nothing.
func deviceOps(in Inputs, patterns []string) ([]mounts.Op, error) {
	glob := in.Glob
	if glob == nil {
		glob = filepath.Glob
	}
	var ops []mounts.Op
	seen := map[string]bool{}
	for _, p := range patterns {
		ms, err := glob(p)
		if err != nil {
			return nil, fmt.Errorf("%s: allow-device = %s: %v", ConfigPath, p, err)
		}
		for _, m := range ms {
			if !seen[m] {
				seen[m] = true
				ops = append(ops, mounts.Op{Kind: mounts.DevBind, Src: m, Dst: m, Optional: true})
			}
		}
	}
	return ops, nil
}
