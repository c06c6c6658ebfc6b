package main

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// blocks splits a generated script into its per-command parts: the text
// from a line "    NAME)" to the next such line.
func blocks(script string) map[string]string {
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^    ([a-z]+)\)$`)
	locs := re.FindAllStringSubmatchIndex(script, -1)
	for i, l := range locs {
		end := len(script)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out[script[l[2]:l[3]]] = script[l[1]:end]
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

// Each completion script and the man page list, for every command, exactly
// the options of its table (run's runOptions, install's flag set, ...):
// generated from the tables, none can drift from what the parser takes.
func TestCompletionsMatchOptionTables(t *testing.T) {
	bash, zsh, fish := bashCompletion(), zshCompletion(), fishCompletion()
	bb, zb := blocks(bash), blocks(zsh)
	optRe := regexp.MustCompile(`'\*(--[a-z0-9-]+)=?\[`)
	fishRe := regexp.MustCompile(`-l ([a-z0-9-]+)`)
	for _, c := range commands {
		want := c.optionNames()
		if want == nil {
			want = []string{}
		}
		// bash: the words offered after the command.
		m := regexp.MustCompile(`local opts='([^']*)'`).FindStringSubmatch(bb[c.name])
		if m == nil {
			t.Errorf("bash: no block for %s", c.name)
		} else {
			var got []string
			for _, w := range strings.Fields(m[1]) {
				if w != "--help" && w != "-h" {
					got = append(got, w)
				}
			}
			if got = sorted(got); !slices.Equal(got, want) {
				t.Errorf("bash %s: %q, table %q", c.name, got, want)
			}
		}
		// zsh: the _arguments specs.
		got := []string{}
		for _, m := range optRe.FindAllStringSubmatch(zb[c.name], -1) {
			got = append(got, m[1])
		}
		if got = sorted(got); !slices.Equal(got, want) {
			t.Errorf("zsh %s: %q, table %q", c.name, got, want)
		}
		// fish: the lines under this subcommand.
		got = []string{}
		for _, line := range strings.Split(fish, "\n") {
			if strings.Contains(line, "'__fish_seen_subcommand_from "+c.name+"'") {
				if m := fishRe.FindStringSubmatch(line); m != nil && m[1] != "help" {
					got = append(got, "--"+m[1])
				}
			}
		}
		if got = sorted(got); !slices.Equal(got, want) {
			t.Errorf("fish %s: %q, table %q", c.name, got, want)
		}
	}
	// The commands offered first are exactly the table's.
	names := commandNames()
	for shell, script := range map[string]string{"bash": bash, "zsh": zsh, "fish": fish} {
		for _, n := range names {
			if !strings.Contains(script, n) {
				t.Errorf("%s: command %s missing", shell, n)
			}
		}
	}
	if got := sorted(slices.Collect(maps.Keys(bb))); !slices.Equal(got, sorted(names)) {
		t.Errorf("bash completes the commands %q, the table has %q", got, names)
	}
	// The man page: each command's options, as .TP entries.
	man := manPage("v0")
	for _, c := range commands {
		if c.name == "plan" {
			continue
		}
		for _, o := range c.opts() {
			if !strings.Contains(man, ".TP\n"+roffOpt(o.name)) {
				t.Errorf("man page: %s %s missing", c.name, o.name)
			}
		}
	}
}

// The parser of run takes every option of runOptions, and only those.
func TestRunParserMatchesTable(t *testing.T) {
	sample := map[string][]string{
		"--perms": {"0700", "--tmpfs", "/t"}, "--net": {"none"}, "--allow-ip": {"10.0.0.1"},
		"--allow-cidr": {"10.0.0.0/8"}, "--internet-cidr": {"198.18.0.0/15"}, "--pids-limit": {"300"}, "--setenv": {"A", "1"}, "--tmpfs-size": {"64M"},
		"--json-status-fd": {"2"}, "--json-status-blocked": {"--json-status-fd", "2"}, "--udp-flows": {"64"}, "--udp-idle-timeout": {"3m"}, "--ask-timeout": {"45s"}, "--osc52": {"allow"},
		"--allow-domain": {"api.github.com"}, "--deny-domain": {"*.example.com:443"},
		"--allow-host-port": {"8080"}, "--publish": {"8080:80"}, "--ssh-agent": {"github.com,forge.test:2222"}, "--ssh-key": {"SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"},
		"--ssh-host-key": {"forge.test ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"},
	}
	for _, o := range runOptions {
		args := sample[o.name]
		if args == nil {
			for range o.args {
				args = append(args, "/x")
			}
		}
		if _, err := parseRunArgs(append(append([]string{o.name}, args...), "true"), !o.runOnly); err != nil {
			t.Errorf("%s %q: %v", o.name, args, err)
		}
		if o.planOnly {
			if _, err := parseRunArgs([]string{o.name, "true"}, false); err == nil {
				t.Errorf("run took the plan-only %s", o.name)
			}
		}
	}
	if _, err := parseRunArgs([]string{"--no-such", "true"}, false); err == nil || !strings.Contains(err.Error(), "unknown option --no-such") {
		t.Errorf("an option outside the table: %v", err)
	}
	// run --help lists each option of run.
	for _, o := range runOnly(false) {
		if !strings.Contains(runHelp(), "\n  "+o.spelled()) {
			t.Errorf("run --help lacks %s", o.spelled())
		}
	}
}

// The bash script completes as it should (run where bash is).
func TestBashCompletionWorks(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cases := []struct {
		words string
		want  string
	}{
		{"claude-sandbox ver", "verify version"},
		{"claude-sandbox run --net ", "jail host none"},
		{"claude-sandbox run --bi", "--bind --bind-try"},
		{"claude-sandbox run --setenv A ", ""},
		{"claude-sandbox completion ", "bash zsh fish"},
		{"claude-sandbox install --pre", "--prefix"},
		{"claude-sandbox run --bind /a /b --net none --cl", "--clearenv"},
		// --net=VALUE: bash splits the line at "=" (COMP_WORDBREAKS), so
		// the words are --net, "=" and the value; with "=" taken out of
		// COMP_WORDBREAKS the word is --net=VALUE whole.
		{"claude-sandbox run --net = j", "jail"},
		{"claude-sandbox run --net =", "jail host none"},
		{"claude-sandbox run --net = ", "jail host none"},
		{"claude-sandbox run --net=n", "--net=none"},
		{"claude-sandbox run --net=", "--net=jail --net=host --net=none"},
		{"claude-sandbox run --net = none --cl", "--clearenv"},
		{"claude-sandbox run --net=none --cl", "--clearenv"},
		{"claude-sandbox install --prefix = /a --dr", "--dry-run"},
		{"claude-sandbox run ls --net=", ""},
		{"claude-sandbox uninstall --dr", "--dry-run"},
	}
	for _, c := range cases {
		words := strings.Fields(c.words)
		if strings.HasSuffix(c.words, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		script := bashCompletion() + "COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _claude_sandbox; echo \"${COMPREPLY[*]}\"\n"
		script = strings.Replace(script, "COMP_WORDS=(", "complete -p claude-sandbox >&2\nCOMP_WORDS=(", 1)
		cmd := exec.Command("bash", "--norc", "--noprofile")
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		var reg bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &reg
		if err := cmd.Run(); err != nil {
			t.Fatalf("%q: %v %s %s", c.words, err, out.String(), reg.String())
		}
		if got := strings.TrimSpace(reg.String()); got != "complete -F _claude_sandbox claude-sandbox" {
			t.Fatalf("the script registers %q", got)
		}
		if got := strings.TrimSpace(out.String()); got != c.want {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
}

// Each script parses in its shell, and the man page in groff, where those
// are installed (scripts/test.sh installs zsh and fish; groff is checked
// where it is).
func TestGeneratedSyntax(t *testing.T) {
	for _, c := range []struct {
		tool  string
		args  []string
		input string
	}{
		{"bash", []string{"-n"}, bashCompletion()},
		{"zsh", []string{"-n"}, zshCompletion()},
		{"fish", []string{"--no-execute"}, fishCompletion()},
		{"groff", []string{"-man", "-z", "-wmac"}, manPage("v0")},
	} {
		if _, err := exec.LookPath(c.tool); err != nil {
			t.Logf("%s not installed: its check is not run", c.tool)
			continue
		}
		cmd := exec.Command(c.tool, c.args...)
		cmd.Stdin = strings.NewReader(c.input)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("%s %q: %v\n%s", c.tool, c.args, err, out)
		}
	}
}

// needShell finds shell, which scripts/test.sh installs: missing, the test
// fails where privileged tests must run (CI), and is skipped elsewhere.
func needShell(t *testing.T, shell string) {
	t.Helper()
	if _, err := exec.LookPath(shell); err != nil {
		if os.Getenv("CLAUDE_SANDBOX_REQUIRE_PRIVILEGED") == "1" {
			t.Fatalf("%s is not installed (scripts/test.sh installs it)", shell)
		}
		t.Skipf("%s is not installed (scripts/test.sh installs it)", shell)
	}
}

// zshDriver types "claude-sandbox WORDS<TAB><Enter>" into an interactive
// zsh on a pseudo-terminal (zsh's zpty) whose fpath holds the generated
// _claude-sandbox, with claude-sandbox a function printing its arguments:
// what it prints is the line the completion made. $1 is the directory,
// $2 the words.
const zshDriver = `zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'PS1=; fpath=('"$1"' $fpath); autoload -U compinit; compinit -u -D; claude-sandbox() { print -r -- "$((6*7))<$*>"; }'
zpty -w -n z "claude-sandbox $2"$'\t'
out=
for i in {1..600}; do
  zpty -r -t z line && out+=$line
  (( i == 20 )) && zpty -w -n z $'\r'
  [[ $out == *42\<*\>* ]] && break
  sleep 0.05
done
zpty -d z
[[ $out == *42\<*\>* ]] || { print -r -- "no answer: $out" >&2; exit 1; }
out=${out##*42<}
print -r -- ${out%%>*}
`

// The generated zsh and fish scripts load in their shells and complete
// flags, --net's values and --net=VALUE.
func TestZshFishComplete(t *testing.T) {
	cases := []struct{ words, zsh, fish string }{
		{"run --cl", "run --clearenv", "--clearenv"},
		{"run --net ", "", "host jail none"},
		{"run --net n", "run --net none", "none"},
		{"run --net=j", "run --net=jail", "--net=jail"},
		{"install --dr", "install --dry-run", "--dry-run"},
		{"uninstall --dr", "uninstall --dry-run", "--dry-run"},
	}
	t.Run("zsh", func(t *testing.T) {
		needShell(t, "zsh")
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "_claude-sandbox"), []byte(zshCompletion()), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if c.zsh == "" {
				continue // a menu, not one line
			}
			out, err := exec.Command("zsh", "-f", "-c", zshDriver, "zsh", dir, c.words).CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != c.zsh {
				t.Errorf("zsh: %q<TAB> made %q (%v), want %q", c.words, got, err, c.zsh)
			}
		}
	})
	t.Run("fish", func(t *testing.T) {
		needShell(t, "fish")
		script := filepath.Join(t.TempDir(), "claude-sandbox.fish")
		if err := os.WriteFile(script, []byte(fishCompletion()), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			out, err := exec.Command("fish", "--no-config", "-c", "source $argv[1]; complete -C $argv[2]", script, "claude-sandbox "+c.words).CombinedOutput()
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
			sort.Strings(got)
			if err != nil || strings.Join(got, " ") != c.fish {
				t.Errorf("fish: %q completes to %q (%v), want %q", c.words, got, err, c.fish)
			}
		}
	})
}
