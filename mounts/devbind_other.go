//go:build !linux

package mounts

import "errors"

// CheckDevDir refuses: device binds exist only on Linux, where the
// sandbox runs (devbind_linux.go).
func CheckDevDir(src string) error {
	return errors.New("device binds need Linux")
}
