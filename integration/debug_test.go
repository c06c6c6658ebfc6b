package integration

import (
	"strings"
	"testing"
)

// --debug routes the jail's records and the relay's diagnostics (which
// otherwise go nowhere) to stderr, every line behind the debug prefix so
// none can be taken for the command's output.
func TestJailDebugLog(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		// A refused flow: recorded, and logged as such.
		got, r := l.probeIn(uid, []string{"--debug"}, "tcp", labDevice+":22")
		if !blockedAtOnce(got) {
			t.Fatalf("probe %s, want a refusal; stderr %q", got, r.Stderr)
		}
		checkDebugLines(t, r.Stderr, "msg=blocked", "dst="+labDevice+":22")
		// An allowed destination with nothing listening: the relay's
		// dial fails, and says so at debug level.
		_, r = l.probeIn(uid, []string{"--debug"}, "tcp", labInternet+":9")
		checkDebugLines(t, r.Stderr, "from=relay", "dial tcp "+labInternet+":9")
		// Without --debug, none of it.
		_, r = l.probeIn(uid, nil, "tcp", labInternet+":9")
		if strings.Contains(r.Stderr, "debug") {
			t.Errorf("without --debug, stderr %q", r.Stderr)
		}
	})
}

// checkDebugLines wants a debug line holding every one of want, and the
// prefix on every debug record.
func checkDebugLines(t *testing.T, stderr string, want ...string) {
	t.Helper()
	found := false
	for _, ln := range strings.Split(stderr, "\n") {
		if !strings.Contains(ln, "level=DEBUG") {
			continue
		}
		if !strings.HasPrefix(ln, "claude-sandbox: debug: ") {
			t.Errorf("debug line without the prefix: %q", ln)
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(ln, w)
		}
		found = found || all
	}
	if !found {
		t.Errorf("no debug line with %q in stderr:\n%s", want, stderr)
	}
}
