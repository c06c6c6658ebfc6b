package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionHelp = `Usage: claude-sandbox version [--json]
       claude-sandbox --version | -V

Prints the version: the module version the binary was built as (a tag, or
"(devel)" for a build from a checkout), the VCS revision and commit time
Go stamped into it ("no VCS stamp" for a build with -buildvcs=false or
outside a git checkout), "+modified" when the tree had uncommitted
changes, and the Go toolchain. --json prints the same as one JSON object.
`

// version, when set at build time (-ldflags "-X main.version=v1.2.3"),
// overrides the module version from the build information.
var version = ""

// revision and revisionTime stand in for the VCS stamp where Go cannot
// record one (a git worktree, whose .git is a file: scripts/release.sh
// sets them with -X); a stamp Go recorded wins.
var revision, revisionTime, revisionModified = "", "", ""

// buildVersion is what the binary knows about its own build.
type buildVersion struct {
	Version  string `json:"version"`
	Module   string `json:"module,omitempty"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readBuildVersion() buildVersion {
	v := buildVersion{Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module = bi.Main.Path
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		v.Version = version
	}
	if v.Revision == "" && revision != "" {
		v.Revision, v.Time, v.Modified = revision, revisionTime, revisionModified == "true"
	}
	return v
}

// String is the one line `claude-sandbox version` prints.
func (v buildVersion) String() string {
	s := "claude-sandbox " + v.Version
	var detail []string
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if v.Modified {
			rev += "+modified"
		}
		detail = append(detail, "commit "+rev)
	} else {
		detail = append(detail, "no VCS stamp")
	}
	if v.Time != "" {
		detail = append(detail, v.Time)
	}
	detail = append(detail, v.Go, v.Platform)
	return s + " (" + strings.Join(detail, ", ") + ")"
}

// newVersionFlags is version's flag set (see newInstallFlags).
func newVersionFlags() (*flag.FlagSet, *bool) {
	f := newFlags("version")
	return f, f.Bool("json", false, "print the same as one JSON object")
}

func versionMain(args []string, stdout, stderr io.Writer) int {
	f, asJSON := newVersionFlags()
	if code, done := parseFlags(f, args, versionHelp, stdout, stderr); done {
		return code
	}
	if f.NArg() > 0 {
		return usageLine(stderr, "version", fmt.Sprintf("unexpected argument %q", f.Arg(0)))
	}
	v := readBuildVersion()
	if *asJSON {
		_ = printJSON(stdout, v)
		return 0
	}
	fmt.Fprintln(stdout, v)
	return 0
}
