package shadow

import (
	"slices"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// A core.hooksPath from any level of git's configuration, relative or
// absolute, that resolves inside the workspace is read-only inside (and
// made on the host first when missing), like .git/hooks.
func TestHooksPathEveryLevel(t *testing.T) {
	const ws = "/home/u/project"
	for _, c := range []struct {
		name  string
		files map[string]string
		env   []string
		want  string
	}{
		{"system", map[string]string{"/etc/gitconfig": "[core]\n\thooksPath = " + ws + "/sys-hooks\n"}, nil, ws + "/sys-hooks"},
		{"GIT_CONFIG_SYSTEM", map[string]string{"/opt/gitconfig": "[core]\nhooksPath=" + ws + "/envsys\n"}, []string{"GIT_CONFIG_SYSTEM=/opt/gitconfig"}, ws + "/envsys"},
		{"global relative", map[string]string{"/home/u/.gitconfig": "[core]\n\thooksPath = .githooks-global\n"}, nil, ws + "/.githooks-global"},
		{"global ~", map[string]string{"/home/u/.gitconfig": "[core]\n\thooksPath = ~/project/tilde\n"}, nil, ws + "/tilde"},
		{"xdg default", map[string]string{"/home/u/.config/git/config": "[core]\n\thooksPath = xdg-hooks\n"}, nil, ws + "/xdg-hooks"},
		{"XDG_CONFIG_HOME", map[string]string{"/cfg/git/config": "[core]\n\thooksPath = \"xdg env\"\n"}, []string{"XDG_CONFIG_HOME=/cfg"}, ws + "/xdg env"},
		{"GIT_CONFIG_GLOBAL", map[string]string{"/g/cfg": "[core]\n\thooksPath = gcg\n"}, []string{"GIT_CONFIG_GLOBAL=/g/cfg"}, ws + "/gcg"},
		{"include.path", map[string]string{
			"/home/u/.gitconfig":         "[include]\n\tpath = .gitconfig.d/hooks\n",
			"/home/u/.gitconfig.d/hooks": "[core]\n\thooksPath = included\n"}, nil, ws + "/included"},
		{"includeIf", map[string]string{
			"/home/u/.gitconfig": "[includeIf \"gitdir:~/work/\"]\n\tpath = ~/work.inc\n",
			"/home/u/work.inc":   "[core]\n\thooksPath = " + ws + "/cond\n"}, nil, ws + "/cond"},
		{"repository", map[string]string{ws + "/.git/config": "[core]\n\thooksPath = repo-hooks # comment\n"}, nil, ws + "/repo-hooks"},
		{"repository include", map[string]string{
			ws + "/.git/config": "[include]\n\tpath = extra\n",
			ws + "/.git/extra":  "[core]\n\thooksPath = repo-inc\n"}, nil, ws + "/repo-inc"},
		{"config.worktree", map[string]string{ws + "/.git/config.worktree": "[core]\n\thooksPath = wt-hooks\n"}, nil, ws + "/wt-hooks"},
		{"continuation line", map[string]string{"/home/u/.gitconfig": "[core]\n\thooksPath = \\\n  cont\n"}, nil, ws + "/cont"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := gitHost()
			h["/home/u/project/.git/config"] = entry{data: "[core]\n\tbare = false\n"}
			for p, s := range c.files {
				h[p] = entry{data: s}
			}
			in := inputs(h)
			in.Environ = append(in.Environ, c.env...)
			if l, _ := build(t, in); !slices.Contains(l.CreateDirs, c.want) {
				t.Errorf("%s is not made on the host first (%q)", c.want, l.CreateDirs)
			}
			h[c.want] = entry{dir: true}
			if _, p := build(t, in); !slices.Contains(dsts(p, mounts.ROBind), c.want) {
				t.Errorf("%s is not read-only (read-only: %q)", c.want, dsts(p, mounts.ROBind))
			}
		})
	}
	// Outside the workspace, or with GIT_CONFIG_NOSYSTEM: nothing.
	h := gitHost()
	h["/etc/gitconfig"] = entry{data: "[core]\n\thooksPath = /usr/share/hooks\n"}
	h["/home/u/.gitconfig"] = entry{data: "[core]\n\thooksPath = ~/hooks\n"}
	h["/usr/share/hooks"], h["/home/u/hooks"] = entry{dir: true}, entry{dir: true}
	_, p := build(t, inputs(h))
	for _, no := range []string{"/usr/share/hooks", "/home/u/hooks"} {
		if slices.Contains(dsts(p, mounts.ROBind), no) {
			t.Errorf("%s (outside the workspace) is bound", no)
		}
	}
	h = gitHost()
	h["/etc/gitconfig"] = entry{data: "[core]\n\thooksPath = " + ws + "/nosys\n"}
	h[ws+"/nosys"] = entry{dir: true}
	in := inputs(h)
	in.Environ = append(in.Environ, "GIT_CONFIG_NOSYSTEM=1")
	if _, p := build(t, in); slices.Contains(dsts(p, mounts.ROBind), ws+"/nosys") {
		t.Error("GIT_CONFIG_NOSYSTEM: the system level was read")
	}
}
