package jail

import (
	"context"
	"fmt"
	"log/slog"
)

// logf adapts the debug logger to the userstack's Logf: each diagnostic
// one record at debug level, formatted only when that level is on (the
// stack calls Logf on its event loop). Nil when there is nothing to log
// to, so the stack keeps its no-op.
func logf(l *slog.Logger) func(string, ...any) {
	if l == nil || !l.Enabled(context.Background(), slog.LevelDebug) {
		return nil
	}
	return func(format string, args ...any) {
		l.Debug(fmt.Sprintf(format, args...), "from", "relay")
	}
}

// debug logs one of the jail's own events at debug level.
func (j *Jail) debug(msg string, args ...any) {
	if j.opts.Logger != nil {
		j.opts.Logger.Debug(msg, append([]any{"from", "jail"}, args...)...)
	}
}
