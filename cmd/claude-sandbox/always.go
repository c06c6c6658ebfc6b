package main

import "github.com/claude-sandbox/claude-sandbox/internal/ask"

// storeAlways stores an approval made with approve --always, for later
// sandboxes of the same user (the approvals store). The seam for that
// store: this build has none, so the approval holds for the session only
// and the command says so (exit 1).
func storeAlways(r ask.Request) error {
	_ = r
	return errNoStore
}
