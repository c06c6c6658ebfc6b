package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// debugPrefix starts every debug line written to stderr, so that the
// launcher's diagnostics are never mistaken for the command's own output
// on the same terminal.
const debugPrefix = "claude-sandbox: debug: "

// prefixWriter writes each line given to it behind prefix. slog's text
// handler writes one record (one line, its values quoted) per Write.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	p.buf = p.buf[:0]
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i+1]
		}
		p.buf = append(append(p.buf, p.prefix...), line...)
		b = b[len(line):]
	}
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return n, nil
}

// debugLogger builds the --debug logger: slog's text records at debug
// level, to file (appended, created 0600; never through a symlink) when
// one is named, else to stderr behind debugPrefix. The returned close
// releases the file.
func debugLogger(file string, stderr io.Writer) (*slog.Logger, func(), error) {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	if file == "" {
		w := &prefixWriter{w: stderr, prefix: []byte(debugPrefix)}
		return slog.New(slog.NewTextHandler(w, opts)), func() {}, nil
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open the debug log: %w (name a regular file you can write, not a symlink)", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("the debug log %s is not a regular file: name a file to append to", file)
	}
	return slog.New(slog.NewTextHandler(f, opts)), func() { f.Close() }, nil
}
