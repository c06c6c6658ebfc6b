package main

import (
	"bytes"
	"os"
	"path/filepath"

	"github.com/claude-sandbox/claude-sandbox/internal/install"
)

// copyFile streams src to dst atomically (install.WriteFile: a temporary
// file in dst's directory, synced, then renamed), creating the directory.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return install.WriteFile(dst, in, uint32(mode.Perm()))
}

// writeIfDifferent writes data to path atomically (as copyFile does),
// keeping an existing file's mode, unless the file already holds exactly
// data. It reports whether it wrote.
func writeIfDifferent(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	if err := install.WriteFile(path, bytes.NewReader(data), uint32(mode.Perm())); err != nil {
		return false, err
	}
	return true, nil
}
