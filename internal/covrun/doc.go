// Package covrun points a coverage build of claude-sandbox at its
// coverage directory. Imported for its side effect by the command's main
// package; empty unless built with the coverrun tag.
//
// A binary built with -cover writes its coverage into the directory its
// environment names in GOCOVERDIR, and warns on stderr when none is named.
// The tests run the binary with environments of their own (a bare PATH
// and HOME, a setpriv to uid 65534, an installed copy), so the coverage
// build (testutil.Build with CLAUDE_SANDBOX_COVERDIR, scripts/test.sh)
// bakes the directory in with -X and the tag: this package's init runs
// before the main package's, where the compiler puts the coverage start,
// and sets GOCOVERDIR when the environment has none.
//
// Not for production: the shipped binary is built without the tag.
package covrun
