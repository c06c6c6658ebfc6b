package nsexec

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func runFilter(f *termFilter, chunks ...string) string {
	var out []byte
	for _, c := range chunks {
		out = f.filter(out, []byte(c))
	}
	return string(f.end(out))
}

// Each sequence is judged as a whole under both policies, also when it
// arrives one byte at a time and in its 8-bit forms.
func TestTermFilter(t *testing.T) {
	for _, c := range []struct {
		name, in string
		out      [3]string // answerless, interactive, interactive with osc52 = allow; "?": in itself
	}{
		{"text", "héllo\r\n\tok\a", [3]string{"héllo\r\n\tok\a", "héllo\r\n\tok\a", "héllo\r\n\tok\a"}},
		{"SGR", "\x1b[1;38:2:1:2:3mx\x1b[m", [3]string{"\x1b[1;38:2:1:2:3mx\x1b[m", "\x1b[1;38:2:1:2:3mx\x1b[m", "\x1b[1;38:2:1:2:3mx\x1b[m"}},
		{"cursor and erase", "\x1b[2J\x1b[H\x1b[10;5H\x1b[K\x1b[3A", [3]string{"\x1b[2J\x1b[H\x1b[10;5H\x1b[K\x1b[3A", "\x1b[2J\x1b[H\x1b[10;5H\x1b[K\x1b[3A", "\x1b[2J\x1b[H\x1b[10;5H\x1b[K\x1b[3A"}},
		{"DSR cursor position", "a\x1b[6nb", [3]string{"ab", "?", "?"}},
		{"DA", "\x1b[c\x1b[>c\x1b[=c\x1b[0c", [3]string{"", "?", "?"}},
		{"DECRQM", "\x1b[?2026$p\x1b[4$p", [3]string{"", "?", "?"}},
		{"window reports", "\x1b[14t\x1b[18t", [3]string{"", "?", "?"}},
		{"title report", "\x1b[21t\x1b[20t", [3]string{"", "", ""}},
		{"XTVERSION", "\x1b[>0q", [3]string{"", "?", "?"}},
		{"kitty keyboard query", "\x1b[?u\x1b[>1u", [3]string{"", "?", "?"}},
		{"restore cursor", "\x1b[u\x1b[s", [3]string{"\x1b[u\x1b[s", "\x1b[u\x1b[s", "\x1b[u\x1b[s"}},
		{"mouse mode", "\x1b[?1000h\x1b[?1006h\x1b[?1004h\x1b[?2004h", [3]string{"", "?", "?"}},
		{"screen modes", "\x1b[?1049h\x1b[?25l\x1b[?2026h", [3]string{"\x1b[?1049h\x1b[?25l\x1b[?2026h", "\x1b[?1049h\x1b[?25l\x1b[?2026h", "\x1b[?1049h\x1b[?25l\x1b[?2026h"}},
		{"mixed modes", "\x1b[?25;1000l", [3]string{"", "?", "?"}},
		{"DECRQSS", "\x1bP$qm\x1b\\", [3]string{"", "?", "?"}},
		{"XTGETTCAP", "\x1bP+q544e\x1b\\", [3]string{"", "?", "?"}},
		{"DECUDK", "\x1bP1;1|17/6c73\x1b\\", [3]string{"", "", ""}},
		{"sixel", "\x1bP0;0;0q#0;2;0;0;0~-\x1b\\", [3]string{"\x1bP0;0;0q#0;2;0;0;0~-\x1b\\", "\x1bP0;0;0q#0;2;0;0;0~-\x1b\\", "\x1bP0;0;0q#0;2;0;0;0~-\x1b\\"}},
		{"APC kitty", "\x1b_Gi=31,a=q;AAAA\x1b\\", [3]string{"", "?", "?"}},
		{"PM SOS", "\x1b^x\x1b\\\x1bXy\x1b\\", [3]string{"", "?", "?"}},
		{"title", "\x1b]0;hé\x07\x1b]2;t\x1b\\", [3]string{"\x1b]0;hé\x07\x1b]2;t\x1b\\", "\x1b]0;hé\x07\x1b]2;t\x1b\\", "\x1b]0;hé\x07\x1b]2;t\x1b\\"}},
		{"hyperlink", "\x1b]8;;https://x/\x1b\\l\x1b]8;;\x1b\\", [3]string{"\x1b]8;;https://x/\x1b\\l\x1b]8;;\x1b\\", "\x1b]8;;https://x/\x1b\\l\x1b]8;;\x1b\\", "\x1b]8;;https://x/\x1b\\l\x1b]8;;\x1b\\"}},
		{"OSC 52 write", "\x1b]52;c;aGk=\x07", [3]string{"", "", "\x1b]52;c;aGk=\x07"}},
		{"OSC 52 read", "\x1b]52;c;?\x07", [3]string{"", "", ""}},
		{"OSC 5522", "\x1b]5522;type=read\x07", [3]string{"", "", ""}},
		{"iTerm2 copy", "\x1b]1337;Copy=:aGk=\x07", [3]string{"", "", ""}},
		{"colour query", "\x1b]11;?\x07\x1b]4;1;?\x1b\\", [3]string{"", "?", "?"}},
		{"colour set", "\x1b]4;1;rgb:ff/00/00\x07", [3]string{"\x1b]4;1;rgb:ff/00/00\x07", "\x1b]4;1;rgb:ff/00/00\x07", "\x1b]4;1;rgb:ff/00/00\x07"}},
		{"unknown OSC", "\x1b]777;notify;a;b\x07", [3]string{"", "?", "?"}},
		{"ENQ", "a\x05b", [3]string{"ab", "ab", "ab"}},
		{"DECID", "\x1bZ", [3]string{"", "", ""}},
		{"leave UTF-8", "\x1b%@", [3]string{"", "", ""}},
		{"charset", "\x1b(0q\x1b(B", [3]string{"\x1b(0q\x1b(B", "\x1b(0q\x1b(B", "\x1b(0q\x1b(B"}},
		{"8-bit CSI query", "a\x9b6nb", [3]string{"ab", "a\x1b[6nb", "a\x1b[6nb"}},
		{"8-bit CSI kept 7-bit", "\x9b1m", [3]string{"\x1b[1m", "\x1b[1m", "\x1b[1m"}},
		{"U+009B CSI", "a\u009b6nb", [3]string{"ab", "a\x1b[6nb", "a\x1b[6nb"}},
		{"8-bit OSC 52", "\x9d52;c;aGk=\x9c", [3]string{"", "", "\x1b]52;c;aGk=\x1b\\"}},
		{"8-bit DCS", "\x90$qm\x9c", [3]string{"", "\x1bP$qm\x1b\\", "\x1bP$qm\x1b\\"}},
		{"8-bit DECID", "\x9a", [3]string{"", "", ""}},
		{"UTF-8 with 0x9b continuation", "ě", [3]string{"ě", "ě", "ě"}},
		{"invalid UTF-8", "\xff\xc3(", [3]string{"\ufffd\ufffd(", "\ufffd\ufffd(", "\ufffd\ufffd("}},
		{"C0 inside CSI", "\x1b[6\nn", [3]string{"\nn", "\nn", "\nn"}},
		{"CAN aborts", "\x1b[6\x18n", [3]string{"n", "n", "n"}},
		{"ESC aborts CSI", "\x1b[6\x1b[1m", [3]string{"\x1b[1m", "\x1b[1m", "\x1b[1m"}},
		{"ST in string aborts", "\x1b]0;a\x9c\x1b[6n", [3]string{"\x1b]0;a\x1b\\", "\x1b]0;a\x1b\\\x1b[6n", "\x1b]0;a\x1b\\\x1b[6n"}},
		{"over-long CSI", "\x1b[" + strings.Repeat("1;", 200) + "mx", [3]string{"x", "x", "x"}},
		{"unterminated title", "\x1b]0;abc", [3]string{"\x1b]0;abc\x1b\\", "\x1b]0;abc\x1b\\", "\x1b]0;abc\x1b\\"}},
		{"unterminated query", "\x1b[6", [3]string{"", "", ""}},
		{"tmux passthrough", "\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\", [3]string{"", "\x1bPtmux;\x1b\\", "\x1bPtmux;\x1b\\\x1b]52;c;aGk=\x07"}},
	} {
		for m := range 3 {
			f := func() *termFilter { return newTermFilter(m > 0, m == 2) }
			want := c.out[m]
			if want == "?" {
				want = c.in
			}
			got := runFilter(f(), c.in)
			if got != want {
				t.Errorf("%s, mode %d: %q became %q, want %q", c.name, m, c.in, got, want)
			}
			var chunks []string
			for i := range len(c.in) {
				chunks = append(chunks, c.in[i:i+1])
			}
			if got1 := runFilter(f(), chunks...); got1 != got {
				t.Errorf("%s, mode %d: byte by byte %q, whole %q", c.name, m, got1, got)
			}
		}
	}
}

// The filter's contract, for any input and any split: the output does not
// depend on how the input was cut, filtering it again changes nothing (so
// a terminal reads it as the filter did), it is valid UTF-8 without C1
// controls or ENQ, and without the answerless policy's forbidden
// introducers.
func FuzzTermFilter(f *testing.F) {
	for _, s := range []string{
		"\x1b[6n", "\x1b]52;c;aGk=\x07", "\x1bP$qm\x1b\\", "\x9b6n", "\u009d52;c;?\u009c",
		"\x1b[?1049h\x1b[1mx", "\x1b]0;t\x1b\\", "\x1b]11;?\x07", "ě\xe2\x9b", "\x1b_Ga=q\x1b\\",
		"\x1bPtmux;\x1b\x1b[6n\x1b\\", "\x1b]8;;u\x1b\\x\x1b]8;;\x07", "\x1b[21t\x05\x1bZ",
	} {
		f.Add([]byte(s), uint8(3), uint8(0))
		f.Add([]byte(s), uint8(1), uint8(1))
		f.Add([]byte(s), uint8(0), uint8(2))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint8, mode uint8) {
		interactive, clip := mode%3 != 0, mode%3 == 2
		whole := runFilter(newTermFilter(interactive, clip), string(in))
		k := int(cut) % (len(in) + 1)
		split := runFilter(newTermFilter(interactive, clip), string(in[:k]), string(in[k:]))
		if split != whole {
			t.Fatalf("cut at %d: %q, whole: %q", k, split, whole)
		}
		again := runFilter(newTermFilter(interactive, clip), whole)
		if again != whole {
			t.Fatalf("not stable: %q then %q", whole, again)
		}
		if !utf8.ValidString(whole) {
			t.Fatalf("invalid UTF-8 out: %q", whole)
		}
		for _, r := range whole {
			if r >= 0x80 && r <= 0x9f || r == 0x05 {
				t.Fatalf("control %U out: %q", r, whole)
			}
		}
		if !interactive {
			for _, bad := range []string{"\x1bP", "\x1b_", "\x1b^", "\x1bX", "\x1bZ", "\x1b]52", "\x1b[6n", "\x1b[c", "\x1b[?1000h"} {
				if strings.Contains(whole, bad) {
					if bad == "\x1bP" && sixelOnly(whole) {
						continue
					}
					t.Fatalf("%q out under the answerless policy: %q", bad, whole)
				}
			}
		}
	})
}

// sixelOnly reports whether every DCS in s is a sixel image.
func sixelOnly(s string) bool {
	for _, part := range strings.Split(s, "\x1bP")[1:] {
		i := strings.IndexFunc(part, func(r rune) bool { return r < '0' || r > ';' })
		if i < 0 || part[i] != 'q' {
			return false
		}
	}
	return true
}

// The filter's cost on a TUI's output: SGR-heavy text with cursor motion.
func BenchmarkTermFilter(b *testing.B) {
	chunk := []byte(strings.Repeat("\x1b[1;32mok\x1b[m line of text, é and ✓\r\n\x1b[2K\x1b[1A\x1b]8;;https://x/\x1b\\link\x1b]8;;\x1b\\", 64))
	for _, interactive := range []bool{false, true} {
		b.Run(map[bool]string{false: "answerless", true: "interactive"}[interactive], func(b *testing.B) {
			f := newTermFilter(interactive, false)
			var out []byte
			b.SetBytes(int64(len(chunk)))
			for range b.N {
				out = f.filter(out[:0], chunk)
			}
		})
	}
}
