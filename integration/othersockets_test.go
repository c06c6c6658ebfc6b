package integration

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// otherUID owns the planted daemons: a uid that is neither a caller of
// the tests (0, 65534) nor, usually, a real account.
const otherUID = 54321

// othersSocketsScript runs in a private mount namespace (so no launch
// elsewhere on the machine ever sees its sockets): another user's daemons
// listen in their 0700 directories (git credential-cache's
// ~/.cache/git/credential/socket, a socket under /run/user/UID) and in a
// directory the unprivileged caller cannot read (0711), and directly in
// a 0700 directory of their own where the view shows it (as another
// container's /tmp/claude-sandbox-UID under Docker's overlay root: its
// socket directory cannot be entered, so it gets no overlay), before a
// launch and while it runs; then a second launch starts with all of them up.
// Each launch connects to every socket from inside and prints the result.
// Set: D (a fresh directory), HM (the caller's home), O (the other uid),
// S (the caller's uid), BIN, WP.
const othersSocketsScript = `set -eu
L1= L2= R1=
trap 'kill $L1 $L2 $R1 2>/dev/null || true; wait' EXIT
mount -t tmpfs -o mode=0755 tmpfs "$D"
mount -t tmpfs -o mode=0755 tmpfs /run/user
H=$D/home/other
mkdir -p $H/.cache/git/credential /run/user/$O $D/unread $D/private
chown -R $O:$O $D/home /run/user/$O $D/unread $D/private
chmod 700 $H/.cache $H/.cache/git/credential /run/user/$O $D/private
chmod 711 $D/unread
waitfor() { # file pid: until the file has a line, while pid lives
	until [ -s "$1" ]; do kill -0 "$2" || { echo "process $2 ended before $1"; exit 1; }; sleep 0.05; done
}
as() { u=$1; shift; setpriv --reuid=$u --regid=$u --clear-groups --pdeathsig=KILL -- "$@"; }
BEFORE="$H/.cache/git/credential/socket /run/user/$O/bus $D/unread/sock $D/private/sock"
AFTER="$H/.cache/git/credential/socket-after /run/user/$O/bus-after"
as $O "$WP" listen $BEFORE > $D/l1 & L1=$!
waitfor $D/l1 $L1
as $S env -i HOME=$HM PATH=/usr/bin:/bin "$BIN" run --net=none -- /bin/sh -c "echo up; while [ ! -e $D/go ]; do sleep 0.05; done; $WP connect $BEFORE $AFTER" > $D/r1 2>&1 & R1=$!
waitfor $D/r1 $R1
as $O "$WP" listen $AFTER > $D/l2 & L2=$!
waitfor $D/l2 $L2
touch $D/go
c=0; wait $R1 || c=$?; R1=
echo "launch1 exit $c"; cat $D/r1
c=0; as $S env -i HOME=$HM PATH=/usr/bin:/bin "$BIN" run --net=none -- "$WP" connect $BEFORE $AFTER > $D/r2 2>&1 || c=$?
echo "launch2 exit $c"; cat $D/r2
`

// TestOtherUsersSocketsNeverStopLaunch: a socket another user binds,
// before the launch or while it runs, never stops a launch (exit 125,
// "mask socket ...: permission denied" for a root caller, whose masks
// are mounted in a user namespace where the other user's 0700 directory
// cannot be walked), and never opens from inside: in a 0700 directory it
// is out of reach the way it is for the sandbox's uid on the host; in a
// directory the caller cannot read but may walk, the listed socket is
// masked.
func TestOtherUsersSocketsNeverStopLaunch(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		wp := testutil.Build(t, "./integration/wallprobe")
		mkdirOwned(t, "/run/user")
		d := testutil.MkdirFor(t, 0)
		hm := testutil.MkdirFor(t, s.uid)
		cmd := testutil.As(0, []string{
			"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "D=" + d, "HM=" + hm, "BIN=" + s.bin, "WP=" + wp,
			fmt.Sprintf("O=%d", otherUID), fmt.Sprintf("S=%d", s.uid),
		}, "unshare", "--mount", "--propagation", "private", "sh", "-c", othersSocketsScript)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		r := testutil.Run(t, cmd)
		t.Logf("%s", r.Stdout)
		if r.Code != 0 {
			t.Fatalf("script: %v", r)
		}
		for _, launch := range []string{"launch1", "launch2"} {
			if !strings.Contains(r.Stdout, launch+" exit 0\n") {
				t.Errorf("%s did not succeed with another user's sockets listening:\n%s", launch, r.Stdout)
			}
		}
		// Six sockets, each tried by both launches.
		var tried int
		for _, line := range strings.Split(r.Stdout, "\n") {
			p, res, ok := strings.Cut(line, " ")
			if !ok || !strings.HasPrefix(p, "/") {
				continue
			}
			tried++
			if !strings.HasPrefix(res, "err:") {
				t.Errorf("another user's socket %s is reachable from inside: %s", p, res)
			}
		}
		if tried != 12 {
			t.Errorf("tried %d connects, want 12:\n%s", tried, r.Stdout)
		}
		if _, err := os.Stat(d + "/l1"); err == nil {
			t.Errorf("the script's tmpfs over %s leaked out of its mount namespace", d)
		}
	})
}
