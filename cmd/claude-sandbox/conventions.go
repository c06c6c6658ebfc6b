package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The conventions every subcommand follows (docs/cli.md): -h and --help
// print the subcommand's help on stdout and exit 0; a bad option is one
// line on stderr naming the option and where the help is, exit 2.

// newFlags is a flag set that prints nothing itself.
func newFlags(cmd string) *flag.FlagSet {
	f := flag.NewFlagSet(cmd, flag.ContinueOnError)
	f.SetOutput(io.Discard)
	f.Usage = func() {}
	return f
}

// parseFlags parses args; done says the caller returns code at once (help
// printed, or a usage error reported).
func parseFlags(f *flag.FlagSet, args []string, help string, stdout, stderr io.Writer) (code int, done bool) {
	if wantsHelp(args) {
		fmt.Fprint(stdout, help)
		return 0, true
	}
	err := f.Parse(args)
	if err == nil {
		return 0, false
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, help)
		return 0, true
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		msg = "unknown option " + dashed(name)
	} else if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		msg = dashed(name) + " needs a value"
	} else if _, rest, ok := strings.Cut(msg, "invalid value "); ok {
		msg = "invalid value " + rest
	}
	return usageLine(stderr, f.Name(), msg), true
}

// wantsHelp reports whether -h or --help comes before any `--`.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--help", "-help":
			return true
		}
	}
	return false
}

// usageLine reports a usage error as the one line every subcommand uses,
// and returns exit status 2.
// parseWithArg parses f's options around at most one argument, which may
// come before them or after them (allow ID --ip X, allow --ip X ID); arg
// is "" when none was given. done: the command ends with code (its help,
// or a usage line).
func parseWithArg(f *flag.FlagSet, cmd string, args []string, help string, stdout, stderr io.Writer) (arg string, code int, done bool) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		arg, args = args[0], args[1:]
	}
	if code, done := parseFlags(f, args, help, stdout, stderr); done {
		return "", code, true
	}
	if arg == "" && f.NArg() > 0 {
		arg = f.Arg(0)
		if err := f.Parse(f.Args()[1:]); err != nil {
			return "", usageLine(stderr, cmd, err.Error()), true
		}
	}
	if f.NArg() > 0 {
		return "", usageLine(stderr, cmd, fmt.Sprintf("unexpected argument %q", f.Arg(0))), true
	}
	return arg, 0, false
}

// printList prints a command's list (ps, requests, approvals): with
// asJSON as a JSON array ([] when empty); else the line empty when there
// is nothing, or a table: header, then row(i, item) for each item, both
// tab-separated.
func printList[T any](w io.Writer, asJSON bool, list []T, empty, header string, row func(int, T) string) {
	if asJSON {
		if list == nil {
			list = []T{}
		}
		_ = printJSON(w, list)
		return
	}
	if len(list) == 0 {
		fmt.Fprintln(w, empty)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for i, e := range list {
		fmt.Fprintln(tw, row(i, e))
	}
	_ = tw.Flush()
}

// printJSON writes v as indented JSON, a line of its own.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func usageLine(stderr io.Writer, cmd, msg string) int {
	fmt.Fprintf(stderr, "claude-sandbox %s: %s (see claude-sandbox %s --help)\n", cmd, msg, cmd)
	return 2
}

// dashed spells an option the way the help does: -x, --long.
func dashed(name string) string {
	name = strings.TrimLeft(name, "-")
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
