package mounts

import "testing"

func TestWithin(t *testing.T) {
	cases := []struct {
		p, dir string
		want   bool
	}{
		{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/x", "/", true}, {"/", "/a", false},
	}
	for _, c := range cases {
		if got := Within(c.p, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v", c.p, c.dir, got)
		}
	}
}

func TestCleanAbs(t *testing.T) {
	for in, want := range map[string]string{"/a//b/": "/a/b", "/a/../b": "/b", "/": "/"} {
		if got, err := CleanAbs(in); err != nil || got != want {
			t.Errorf("CleanAbs(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "a", "./a", "/a\x00b"} {
		if _, err := CleanAbs(bad); err == nil {
			t.Errorf("CleanAbs(%q): want an error", bad)
		}
	}
}

func TestOpString(t *testing.T) {
	cases := map[string]Op{
		"bind /a -> /b":          {Kind: Bind, Src: "/a", Dst: "/b"},
		"ro-bind /a -> /b (try)": {Kind: ROBind, Src: "/a", Dst: "/b", Optional: true},
		"tmpfs /t (mode 1777)":   {Kind: Tmpfs, Dst: "/t", Mode: 0o1777},
		"mask /m":                {Kind: Mask, Dst: "/m"},
	}
	for want, op := range cases {
		if got := op.String(); got != want {
			t.Errorf("%+v: %q, want %q", op, got, want)
		}
	}
}

func TestSplitParent(t *testing.T) {
	for in, want := range map[string][2]string{"/a": {"/", "a"}, "/a/b": {"/a", "b"}, "/a/b/c": {"/a/b", "c"}} {
		p, n := splitParent(in)
		if p != want[0] || n != want[1] {
			t.Errorf("splitParent(%q) = %q, %q", in, p, n)
		}
	}
}
