module github.com/claude-sandbox/claude-sandbox

go 1.26.8

require (
	github.com/creack/pty v1.1.24
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)
