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

// presets is the table behind Presets; see there for what is left out.
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
		{"objects.githubusercontent.com", "release asset downloads (older host)"},
		{"release-assets.githubusercontent.com", "release asset downloads (current host)"},
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
//
// The presets are small on purpose: every name is a way out of the jail,
// and several of these services take uploads from anyone with an account
// (a git push, a package publish, an API call made with someone else's
// key), so a preset says which services are trusted, not that nothing can
// leave through them. What is left out, and why:
//
//   - @claude-code: the telemetry and error-report hosts
//     (statsig.anthropic.com, sentry.io) and the auto-updater's download
//     hosts. Claude Code works without them; sentry.io takes events for any
//     project, one an attacker owns included; and a sandboxed tool should
//     not update itself. Allow them by hand if you want them.
//   - @github: a wildcard over githubusercontent.com (it also serves every
//     user's gists and uploads), Git LFS object hosts, github.io (anyone's
//     pages) and ghcr.io (container images). Allow what you use by hand.
//   - @go: storage.googleapis.com: anyone can create a bucket there, so
//     allowing the host opens an upload channel to anyone, and the module
//     proxy and checksum database do not need it. Modules fetched from
//     their origin (GOPROXY=direct, GOPRIVATE, GONOSUMDB) need their own
//     hosts allowed.
//   - @npm: the npm web site and other registries and CDNs (yarnpkg,
//     unpkg, jsdelivr).
//   - @pypi: other indexes (--extra-index-url hosts) and whatever a
//     package's build step downloads by itself.
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
