package sandbox

// SetDefaultStageExe makes the tests' sandboxes use exe as their stage
// binary (see Spec.StageExe) when a Spec names none.
func SetDefaultStageExe(exe string) { defaultStageExe = exe }

// CanBeOwnStage reports whether this binary can run the stages itself.
func CanBeOwnStage() bool { return allThreadsSyscallWorks() }

// DefaultStageExe is the stage binary the tests' sandboxes use ("" for
// this binary itself).
func DefaultStageExe() string { return defaultStageExe }
