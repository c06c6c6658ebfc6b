package nsexec

import (
	"bytes"
	"io"
	"strconv"
	"unicode/utf8"
)

// termFilter is the pty's output on its way to the host terminal: it
// keeps text and the escape sequences that only draw, and drops those that
// make the terminal answer into its input or touch the clipboard. It is a
// pure state machine (filter), so a sequence split across reads is judged
// whole; fuzzed by FuzzTermFilter.
//
// Whatever it emits is canonical, so the terminal cannot read it otherwise
// than the filter did: text is valid UTF-8 without C1 controls (an 8-bit
// C1 byte or U+0080..U+009F is parsed as the control it is; other invalid
// bytes become U+FFFD), only the harmless C0 controls pass (BEL, BS, HT,
// LF, VT, FF, CR, SO, SI), and every sequence kept is re-emitted in its
// 7-bit form (ESC [, ESC ], ESC P, ESC _ ...) with an ESC \ or BEL
// terminator. A malformed or over-long sequence is dropped whole.
//
// Two policies:
//   - answerless (interactive false): the terminal's input is not the
//     sandbox's (stdin is not that terminal), so any answer would be read
//     by whatever reads the terminal next: the host's shell. An allowlist
//     keeps drawing (SGR, cursor motion, erasing, scrolling, the screen
//     and cursor modes, titles, hyperlinks, colours set, sixel) and drops
//     the rest: every CSI that reports (DA, DSR, DECRQM, window reports,
//     XTVERSION, DECRQCRA...), modes that make the terminal send input
//     (mouse, focus, bracketed paste, keyboard protocols), DCS (DECRQSS,
//     XTGETTCAP, DECUDK), APC/PM/SOS, OSC queries and OSC 52, ENQ, DECID.
//   - interactive: the terminal's answers come back to the sandbox through
//     the relay, so queries pass; what would outlive the session or reach
//     past it is dropped: clipboard writes (OSC 52 unless clipboard is
//     set; OSC 5522; iTerm2's Copy), clipboard reads (always), function
//     key definitions (DECUDK), title reports (CSI 20/21 t) and media copy.
type termFilter struct {
	interactive bool // the terminal's answers reach the sandbox
	clipboard   bool // interactive only: OSC 52 clipboard writes pass

	st    fstate
	head  []byte // the sequence's bytes after its introducer, until decided
	kind  byte   // the string's 7-bit introducer: ']' 'P' '_' '^' 'X'
	n     int    // bytes of the current string (or CSI), for the bounds
	carry []byte // an incomplete UTF-8 sequence at the end of a write
}

type fstate uint8

const (
	stGround  fstate = iota
	stEsc            // after ESC: intermediates in head
	stCSI            // after CSI: parameters and intermediates in head
	stCSISkip        // an over-long or malformed CSI: up to its final byte
	stStrHead        // a string whose fate is not decided yet: body in head
	stStrPass        // a string being passed on
	stStrDrop        // a string being dropped
)

// The bounds: a CSI longer than maxCSI or a string whose fate is not
// decided within maxHead bytes is dropped; a string passed on is ended
// (with CAN, which makes the terminal drop it too) after maxString bytes.
const (
	maxCSI    = 256
	maxHead   = 1024
	maxString = 1 << 24
)

func newTermFilter(interactive, clipboard bool) *termFilter {
	return &termFilter{interactive: interactive, clipboard: clipboard && interactive}
}

// filter appends to dst what src becomes, given everything before it.
func (f *termFilter) filter(dst, src []byte) []byte {
	if len(f.carry) > 0 {
		src = append(f.carry, src...)
		f.carry = nil
	}
	for i := 0; i < len(src); {
		b := src[i]
		if f.st == stGround && b >= 0x20 && b < 0x7f {
			// A run of printable ASCII: copied whole.
			j := i + 1
			for j < len(src) && src[j] >= 0x20 && src[j] < 0x7f {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		if b < utf8.RuneSelf {
			dst = f.ascii(dst, b)
			i++
			continue
		}
		if !utf8.FullRune(src[i:]) {
			f.carry = append([]byte(nil), src[i:]...)
			break
		}
		r, size := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			if b <= 0x9f {
				dst = f.c1(dst, b)
			} else {
				dst = f.text(dst, []byte(string(utf8.RuneError)))
			}
		case r <= 0x9f:
			dst = f.c1(dst, byte(r))
		default:
			dst = f.text(dst, src[i:i+size])
		}
		i += size
	}
	return dst
}

// end is the end of the output: an incomplete UTF-8 sequence becomes
// U+FFFD, an undecided sequence is dropped, a string being passed is
// terminated so the host terminal is not left inside it.
func (f *termFilter) end(dst []byte) []byte {
	if len(f.carry) > 0 {
		f.carry = nil
		dst = f.text(dst, []byte(string(utf8.RuneError)))
	}
	if f.st == stStrPass {
		dst = append(dst, 0x1b, '\\')
	}
	f.st, f.head = stGround, f.head[:0]
	return dst
}

// ascii handles one byte below 0x80 in the current state.
func (f *termFilter) ascii(dst []byte, b byte) []byte {
	const esc, can, sub, bel = 0x1b, 0x18, 0x1a, 0x07
	switch f.st {
	case stGround:
		return f.ground(dst, b)
	case stEsc:
		switch {
		case b == esc:
			f.head = f.head[:0]
		case b == can || b == sub:
			f.st = stGround
		case b < 0x20 || b == 0x7f:
			f.st = stGround
			return f.ground(dst, b)
		case b < 0x30:
			f.head = append(f.head, b)
			if len(f.head) > 4 {
				f.st = stGround
			}
		default:
			return f.escFinal(dst, b)
		}
		return dst
	case stCSI, stCSISkip:
		switch {
		case b == esc:
			f.toEsc()
		case b == can || b == sub:
			f.st = stGround
		case b == 0x7f:
		case b < 0x20:
			f.st = stGround
			return f.ground(dst, b)
		case b >= 0x40:
			if f.st == stCSI && csiAllowed(f.head, b, f.interactive) {
				dst = append(dst, esc, '[')
				dst = append(dst, f.head...)
				dst = append(dst, b)
			}
			f.st = stGround
		default:
			f.n++
			// Parameters (0x30-0x3f) never follow an intermediate.
			if f.st == stCSI && (f.n > maxCSI || b >= 0x30 && len(f.head) > 0 && f.head[len(f.head)-1] < 0x30) {
				f.st = stCSISkip
			}
			if f.st == stCSI {
				f.head = append(f.head, b)
			}
		}
		return dst
	default: // a string
		switch {
		case b == bel:
			return f.endString(dst, bel)
		case b == esc:
			dst = f.endString(dst, esc)
			f.toEsc()
			return dst
		case b == can || b == sub:
			if f.st == stStrPass {
				dst = append(dst, can)
			}
			f.st = stGround
			return dst
		case b < 0x20 || b == 0x7f:
			return dst // ignored inside strings
		}
		return f.text(dst, []byte{b})
	}
}

// ground handles a byte below 0x80 outside any sequence.
func (f *termFilter) ground(dst []byte, b byte) []byte {
	switch {
	case b == 0x1b:
		f.toEsc()
	case b >= 0x20 && b < 0x7f, b >= 0x07 && b <= 0x0f:
		// Text, and BEL, BS, HT, LF, VT, FF, CR, SO, SI; not ENQ (the
		// answerback message), NUL or the other C0 controls.
		dst = append(dst, b)
	}
	return dst
}

func (f *termFilter) toEsc() {
	f.st, f.head, f.n = stEsc, f.head[:0], 0
}

// escFinal ends an ESC sequence (intermediates in head) with its final
// byte, or enters the CSI or a string.
func (f *termFilter) escFinal(dst []byte, b byte) []byte {
	if len(f.head) == 0 {
		switch b {
		case '[':
			f.st, f.n = stCSI, 0
			return dst
		case ']', 'P', '_', '^', 'X':
			f.startString(b)
			return dst
		}
	}
	if escAllowed(f.head, b) {
		dst = append(dst, 0x1b)
		dst = append(dst, f.head...)
		dst = append(dst, b)
	}
	f.st = stGround
	return dst
}

// c1 handles an 8-bit control (a lone byte 0x80-0x9f or U+0080..U+009F):
// introducers start their sequence as their 7-bit forms do, and end any
// sequence in progress (as a VT500-style parser does); the rest (DECID,
// NEL, ST alone...) are dropped.
func (f *termFilter) c1(dst []byte, b byte) []byte {
	switch f.st {
	case stStrHead, stStrPass, stStrDrop:
		dst = f.endString(dst, b)
	}
	f.st, f.head = stGround, f.head[:0]
	switch b {
	case 0x9b:
		f.st, f.n = stCSI, 0
	case 0x9d:
		f.startString(']')
	case 0x90:
		f.startString('P')
	case 0x9f:
		f.startString('_')
	case 0x9e:
		f.startString('^')
	case 0x98:
		f.startString('X')
	}
	return dst
}

// text handles one character (printable ASCII or a rune from U+00A0).
func (f *termFilter) text(dst, r []byte) []byte {
	switch f.st {
	case stGround:
		return append(dst, r...)
	case stEsc, stCSI, stCSISkip:
		f.st = stGround
		return append(dst, r...)
	case stStrHead:
		f.n += len(r)
		f.head = append(f.head, r...)
		switch f.decide(false) {
		case strPass:
			dst = f.emitHead(dst)
			f.st = stStrPass
		case strDrop:
			f.st = stStrDrop
		default:
			if len(f.head) > maxHead {
				f.st = stStrDrop
			}
		}
	case stStrPass:
		f.n += len(r)
		if f.n > maxString {
			f.st = stStrDrop
			return append(dst, 0x18)
		}
		dst = append(dst, r...)
	}
	return dst
}

func (f *termFilter) startString(kind byte) {
	f.st, f.kind, f.head, f.n = stStrHead, kind, f.head[:0], 0
	// A string with an empty body is judged at its end.
}

func (f *termFilter) emitHead(dst []byte) []byte {
	dst = append(dst, 0x1b, f.kind)
	return append(dst, f.head...)
}

// endString ends the current string on by (BEL, ESC, or a C1 byte).
func (f *termFilter) endString(dst []byte, by byte) []byte {
	st := f.st
	f.st = stGround
	if st == stStrHead {
		if f.decide(true) != strPass {
			return dst
		}
		dst = f.emitHead(dst)
	} else if st != stStrPass {
		return dst
	}
	if by == 0x07 && f.kind == ']' {
		return append(dst, 0x07)
	}
	return append(dst, 0x1b, '\\')
}

type strVerdict uint8

const (
	strMore strVerdict = iota
	strPass
	strDrop
)

// decide judges the string so far (head); whole says it has ended.
func (f *termFilter) decide(whole bool) strVerdict {
	switch f.kind {
	case ']':
		return f.decideOSC(whole)
	case 'P':
		return f.decideDCS(whole)
	}
	// APC (kitty graphics, whose queries answer), PM, SOS.
	if f.interactive {
		return strPass
	}
	return strDrop
}

func (f *termFilter) decideOSC(whole bool) strVerdict {
	num, rest, found := bytes.Cut(f.head, []byte{';'})
	if !found && !whole {
		if len(num) > 6 {
			return strDrop
		}
		return strMore
	}
	ps, err := strconv.Atoi(string(num))
	if err != nil || len(num) == 0 || len(num) > 6 || len(bytes.Trim(num, "0123456789")) > 0 {
		return strDrop
	}
	switch {
	case ps == 52:
		// Selection, then the data: "?" asks the terminal for the
		// clipboard, never passed; anything else writes it.
		if !f.clipboard {
			return strDrop
		}
		_, data, found := bytes.Cut(rest, []byte{';'})
		if !found || len(data) == 0 {
			if whole {
				return strDrop
			}
			return strMore
		}
		if data[0] == '?' {
			return strDrop
		}
		return strPass
	case ps == 5522:
		return strDrop // kitty's clipboard protocol
	case ps == 1337 && f.interactive:
		// iTerm2: Copy= and CopyToClipboard write the clipboard.
		if !whole && len(rest) < len("Copy") {
			return strMore
		}
		if bytes.HasPrefix(rest, []byte("Copy")) || bytes.HasPrefix(rest, []byte("EndCopy")) {
			return strDrop
		}
		return strPass
	case f.interactive:
		return strPass
	case ps == 0 || ps == 1 || ps == 2 || ps == 7 || ps == 8 || ps == 133:
		// Titles, the working directory, hyperlinks, prompt marks.
		return strPass
	case ps == 4 || ps == 5 || ps >= 10 && ps <= 19 || ps == 104 || ps == 105 || ps >= 110 && ps <= 119:
		// Colours: set, or reset; a "?" anywhere asks for one.
		if !whole {
			return strMore
		}
		if bytes.IndexByte(rest, '?') >= 0 {
			return strDrop
		}
		return strPass
	}
	return strDrop
}

// decideDCS judges a DCS by its header: parameters, intermediates, final.
func (f *termFilter) decideDCS(whole bool) strVerdict {
	i := 0
	for i < len(f.head) && f.head[i] >= 0x30 && f.head[i] <= 0x3f {
		i++
	}
	params := f.head[:i]
	for i < len(f.head) && f.head[i] >= 0x20 && f.head[i] <= 0x2f {
		i++
	}
	inter := f.head[len(params):i]
	if i == len(f.head) {
		if whole || i > 64 {
			return strDrop
		}
		return strMore
	}
	final := f.head[i]
	if final < 0x40 || final > 0x7e {
		return strDrop
	}
	// Sixel graphics: numeric parameters, no intermediate, q.
	if final == 'q' && len(inter) == 0 && len(bytes.Trim(params, "0123456789;")) == 0 {
		return strPass
	}
	if !f.interactive {
		return strDrop
	}
	if final == '|' && len(inter) == 0 {
		return strDrop // DECUDK: keys that type what the sandbox chose
	}
	return strPass
}

// escAllowed judges an ESC sequence that is neither CSI nor a string.
func escAllowed(inter []byte, final byte) bool {
	if len(inter) == 0 {
		// Not Z (DECID: the terminal answers), not a lone ST (\).
		return bytes.IndexByte([]byte("6789=>DEHMNOcno|}~Fl"), final) >= 0
	}
	if len(inter) != 1 {
		return false
	}
	// Charset designations, DECALN and line sizes, 7/8-bit answers; not
	// ESC % (leaving UTF-8 would let text carry C1 controls).
	return bytes.IndexByte([]byte("()*+-./# "), inter[0]) >= 0
}

// decModes are the DEC private modes a program without the terminal's
// input may set: how the screen and cursor look, never what the terminal
// sends (mouse, focus, paste, key encodings, resize and theme reports).
var decModes = map[int]bool{1: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 12: true, 25: true,
	40: true, 45: true, 47: true, 69: true, 95: true, 1047: true, 1048: true, 1049: true, 2026: true, 2027: true}

// csiAllowed judges a whole CSI: head is its parameter and intermediate
// bytes, final its final byte.
func csiAllowed(head []byte, final byte, interactive bool) bool {
	i := 0
	for i < len(head) && head[i] >= 0x30 {
		i++
	}
	params, inter := head[:i], head[i:]
	var priv byte
	if len(params) > 0 && params[0] >= 0x3c {
		priv, params = params[0], params[1:]
	}
	if bytes.ContainsAny(params, "<=>?") {
		return false
	}
	if interactive {
		switch {
		case final == 'i' && len(inter) == 0:
			return false // media copy: the terminal's printer
		case final == 't' && priv == 0 && len(inter) == 0:
			// 20 and 21 report the icon label and the title, whatever
			// the sandbox set them to.
			p, _, _ := bytes.Cut(params, []byte{';'})
			return string(p) != "20" && string(p) != "21"
		}
		return true
	}
	switch string(inter) {
	case "":
	case " ":
		return priv == 0 && (final == 'q' || final == '@' || final == 'A') // cursor style, shifts
	case "!":
		return priv == 0 && final == 'p' // soft reset
	case "\"":
		return priv == 0 && (final == 'q' || final == 'p')
	default:
		return false
	}
	switch priv {
	case 0:
		switch final {
		case '@', 'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'P', 'S', 'T', 'X', 'Z',
			'`', 'a', 'b', 'd', 'e', 'f', 'g', 'm', 'r', 's':
			return true
		case 'u':
			return len(params) == 0 // restore the cursor; with parameters, keyboard protocols
		case 'h', 'l':
			return modesIn(params, map[int]bool{4: true}) // insert mode only
		}
	case '?':
		switch final {
		case 'h', 'l':
			return modesIn(params, decModes)
		case 'J', 'K':
			return true
		}
	}
	return false
}

func modesIn(params []byte, allowed map[int]bool) bool {
	if len(params) == 0 {
		return false
	}
	for _, p := range bytes.Split(params, []byte{';'}) {
		n, err := strconv.Atoi(string(p))
		if err != nil || !allowed[n] {
			return false
		}
	}
	return true
}

// filterWriter writes what a termFilter makes of each write to w; Close
// ends the stream (see termFilter.end). It reports every write as whole.
type filterWriter struct {
	f   *termFilter
	w   io.Writer
	buf []byte
}

func (fw *filterWriter) Write(p []byte) (int, error) {
	fw.buf = fw.f.filter(fw.buf[:0], p)
	if len(fw.buf) > 0 {
		if _, err := fw.w.Write(fw.buf); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

func (fw *filterWriter) Close() error {
	fw.buf = fw.f.end(fw.buf[:0])
	if len(fw.buf) > 0 {
		_, err := fw.w.Write(fw.buf)
		return err
	}
	return nil
}
