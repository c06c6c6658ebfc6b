package netpolicy

import (
	"slices"
	"strings"
)

// Preset is a named, documented group of domain rules that a user can
// allow in one word ("@github").
type Preset struct {
	Name    string // as the user writes it, with the '@': "@github"
	Entries []PresetEntry
}

// PresetEntry is one rule of a preset and why it is there.
type PresetEntry struct {
	Rule   string // a rule for ParseDomain
	Reason string // one line, for --help and the docs
}

// presets are kept small on purpose: every name is a way out of the jail,
// and several of these services accept uploads from anyone with an account
// (a git push, a package publish, an API call with someone else's key), so
// a preset is a statement of trust in the service, not a guarantee that
// nothing can leave. What is left out, and why:
//
//   - @claude-code: the telemetry and error-report hosts
//     (statsig.anthropic.com, sentry.io). Claude Code works without them,
//     and sentry.io takes events for any project, including one an attacker
//     owns. Add them by hand if you want Claude Code's telemetry.
//   - @github: a wildcard over githubusercontent.com (it also serves every
//     user's uploaded content, e.g. gists), github.io (anyone's pages), and
//     ghcr.io (containers are not what this preset is for).
//   - @go: storage.googleapis.com and other bucket hosts: anyone can create
//     a bucket there, so allowing it opens an upload channel to anyone; the
//     Go module proxy and checksum database do not need it. Modules fetched
//     directly from their VCS (GOPROXY=direct, GOPRIVATE) need their own
//     hosts allowed.
//   - @npm: the npm web site and the yarn/unpkg CDNs.
var presets = []Preset{
	{Name: "@claude-code", Entries: []PresetEntry{
		{"api.anthropic.com", "the Claude API (every model request)"},
		{"claude.ai", "sign-in with a Claude (Pro/Max) subscription"},
		{"console.anthropic.com", "sign-in with a Claude Console account and its token refresh"},
		{"platform.claude.com", "the Claude Console's current address, used by its sign-in"},
	}},
	{Name: "@github", Entries: []PresetEntry{
		{"github.com", "git over HTTPS and the web site"},
		{"api.github.com", "the REST and GraphQL API (gh, actions, tools that query releases)"},
		{"codeload.github.com", "source archives (tarball and zip downloads)"},
		{"raw.githubusercontent.com", "raw file downloads"},
		{"objects.githubusercontent.com", "release assets and LFS objects"},
		{"release-assets.githubusercontent.com", "release assets (newer download host)"},
	}},
	{Name: "@go", Entries: []PresetEntry{
		{"proxy.golang.org", "the Go module proxy (module and toolchain downloads)"},
		{"sum.golang.org", "the Go checksum database that verifies downloaded modules"},
	}},
	{Name: "@npm", Entries: []PresetEntry{
		{"registry.npmjs.org", "the npm registry (package metadata, tarballs, audit)"},
	}},
	{Name: "@pypi", Entries: []PresetEntry{
		{"pypi.org", "the Python package index (pip's simple API and metadata)"},
		{"files.pythonhosted.org", "the Python package files pip downloads"},
	}},
}

// Presets returns the known presets sorted by name, for help and docs. The
// result is a copy.
func Presets() []Preset {
	out := make([]Preset, len(presets))
	for i, p := range presets {
		out[i] = Preset{Name: p.Name, Entries: slices.Clone(p.Entries)}
	}
	slices.SortFunc(out, func(a, b Preset) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func lookupPreset(name string) (Preset, bool) {
	for _, p := range presets {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	return Preset{}, false
}

func presetNames() []string {
	var out []string
	for _, p := range Presets() {
		out = append(out, p.Name)
	}
	return out
}
