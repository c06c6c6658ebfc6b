package nsexec

import "testing"

// The sample decodes without error: otherwise the decoders of the fields
// after the error would not be built.
func TestStartSampleDecodes(t *testing.T) {
	s, err := decodeStartSample()
	if err != nil {
		t.Fatal(err)
	}
	if s.Plan == nil || len(s.Plan.Mounts) != 1 || s.Termios == nil || s.Winsize == nil || s.Plan.Egress == nil {
		t.Fatalf("sample decoded partly: %+v", s)
	}
}
