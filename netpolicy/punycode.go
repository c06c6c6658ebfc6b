package netpolicy

import (
	"strings"
	"unicode/utf8"
)

// toASCII converts each non-ASCII label of a lower-cased s to its punycode
// "xn--" form (RFC 3492). It is only a hint for an error message: it does
// not apply the IDNA mapping and normalisation rules, so for names already
// in lower case and composed form (the common case) it gives the name a
// resolver would look up, and for others it may not.
func toASCII(s string) (string, bool) {
	if !utf8.ValidString(s) {
		return "", false
	}
	labels := strings.Split(strings.ToLower(s), ".")
	for i, l := range labels {
		ascii := true
		for j := 0; j < len(l); j++ {
			if l[j] >= 0x80 {
				ascii = false
				break
			}
		}
		if ascii {
			continue
		}
		enc, ok := punyEncode(l)
		if !ok {
			return "", false
		}
		labels[i] = "xn--" + enc
	}
	return strings.Join(labels, "."), true
}

// Bootstring parameters for punycode (RFC 3492 section 5).
const (
	punyBase        = 36
	punyTMin        = 1
	punyTMax        = 26
	punySkew        = 38
	punyDamp        = 700
	punyInitialBias = 72
	punyInitialN    = 128
)

func punyAdapt(delta, numPoints int, first bool) int {
	if first {
		delta /= punyDamp
	} else {
		delta /= 2
	}
	delta += delta / numPoints
	k := 0
	for delta > ((punyBase-punyTMin)*punyTMax)/2 {
		delta /= punyBase - punyTMin
		k += punyBase
	}
	return k + (punyBase-punyTMin+1)*delta/(delta+punySkew)
}

func punyDigit(d int) byte {
	if d < 26 {
		return byte('a' + d)
	}
	return byte('0' + d - 26)
}

// punyEncode encodes one label (RFC 3492 section 6.3).
func punyEncode(label string) (string, bool) {
	runes := []rune(label)
	var out []byte
	for _, r := range runes {
		if r < 0x80 {
			out = append(out, byte(r))
		}
	}
	basic := len(out)
	h := basic
	if basic > 0 {
		out = append(out, '-')
	}
	n, delta, bias := punyInitialN, 0, punyInitialBias
	const maxInt = 1<<31 - 1
	for h < len(runes) {
		m := maxInt
		for _, r := range runes {
			if int(r) >= n && int(r) < m {
				m = int(r)
			}
		}
		if (m - n) > (maxInt-delta)/(h+1) {
			return "", false
		}
		delta += (m - n) * (h + 1)
		n = m
		for _, r := range runes {
			if int(r) < n {
				delta++
				if delta > maxInt-1 {
					return "", false
				}
			}
			if int(r) == n {
				q := delta
				for k := punyBase; ; k += punyBase {
					t := k - bias
					if t < punyTMin {
						t = punyTMin
					} else if t > punyTMax {
						t = punyTMax
					}
					if q < t {
						break
					}
					out = append(out, punyDigit(t+(q-t)%(punyBase-t)))
					q = (q - t) / (punyBase - t)
				}
				out = append(out, punyDigit(q))
				bias = punyAdapt(delta, h+1, h == basic)
				delta = 0
				h++
			}
		}
		delta++
		n++
	}
	return string(out), true
}
