// Package guard is the integrity guard: the pieces that make Claude Code
// refuse to work when it was launched outside the sandbox.
//
//   - [Merge] and [Remove] edit Claude Code's managed settings
//     (/etc/claude-code/managed-settings.json, the highest-precedence layer,
//     root-owned): the guard's two hooks, the auto-updater switched off,
//     every foreign key and hook kept.
//   - [Decide] is the gate (the UserPromptSubmit hook): it says whether
//     this process runs inside the sandbox, from facts the sandbox's kernel
//     state proves, never from an environment variable alone.
//
// Pure code over bytes and facts: reading /proc, writing files and exit
// codes belong to the command.
package guard
