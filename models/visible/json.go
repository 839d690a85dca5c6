package visible

import (
	"strings"
	"unicode/utf16"
)

// RevealJSON shows JSON text (a machine value) by Reveal's rule for hidden
// code points, and also shows the hidden code points
// JSON writes as escapes: in "body\u0000" Reveal reads six visible
// characters, yet the value holds a NUL. Such an escape is shown as
// ⟨U+0000⟩, as the page's warning says hidden characters are, and counted
// among the findings. Escapes of what is not hidden in mode stay as
// written (\" \\ \/, and \n and \t in free text), and so does an escaped
// ⟨: written as \u27e8 it cannot pass for an escape of the page's own.
// Findings of escapes carry the escape's byte offset in raw.
func RevealJSON(raw string, mode Mode) Text {
	t := Reveal(raw, Strict)
	if !strings.Contains(raw, `\`) {
		return t
	}
	// Reveal neither adds nor removes a backslash or any other ASCII, so
	// the escapes of shown are those of raw, in the same order.
	s, fs := t.Shown, t.Findings
	var b strings.Builder
	var changed bool
	ri := 0
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '\\')
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		b.WriteString(s[i : i+j])
		i += j
		if k := strings.IndexByte(raw[ri:], '\\'); k >= 0 {
			ri += k
		}
		r, n := jsonEscape(s[i:])
		if n == 0 { // not an escape JSON knows: shown as it is
			b.WriteByte('\\')
			i, ri = i+1, ri+1
			continue
		}
		if k, hidden := Classify(r, mode); hidden && k != Lookalike {
			fs = append(fs, Finding{Offset: ri, Rune: r, Kind: k})
			b.WriteString(Escape(r))
			changed = true
		} else {
			b.WriteString(s[i : i+n])
		}
		i, ri = i+n, ri+n
	}
	if !changed {
		return t
	}
	return Text{Shown: b.String(), Findings: fs}
}

// jsonEscape decodes the JSON escape s begins with (a backslash): the code
// point it stands for and its length in bytes, 0 when s begins with no
// escape JSON knows. A UTF-16 surrogate pair is one escape; a lone
// surrogate is its own code point.
func jsonEscape(s string) (rune, int) {
	if len(s) < 2 || s[0] != '\\' {
		return 0, 0
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		esc := []byte(s[:min(len(s), 12)]) // the escape, and a low half after it
		r, ok := hex4(esc, 2)
		if !ok {
			return 0, 0
		}
		if utf16.IsSurrogate(r) && r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := hex4(esc, 8); ok {
				if pair := utf16.DecodeRune(r, lo); pair != '\uFFFD' {
					return pair, 12
				}
			}
		}
		return r, 6
	}
	return 0, 0
}
