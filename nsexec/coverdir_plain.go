//go:build !coverrun

package nsexec

// coverDir is "": only a build with the coverrun tag hands a stage its
// coverage directory (cover_linux.go).
func coverDir() string { return "" }
