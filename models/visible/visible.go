// Package visible is the one rule for text a reviewer must be able to see
// as it is: it finds every code point that is invisible, or that changes
// the direction or appearance of the text around it, and renders it as a
// visible escape such as ⟨U+202E⟩, with a warning to show beside it.
//
// The console's proposal page, the pending list and `countersign review
// show` all call Reveal (RevealJSON for machine values, whose JSON escapes
// can hide a character too); the registry's reject_invisible option refuses the
// same code points (Find).
//
// What counts as hidden:
//   - format characters (Unicode category Cf), among them the bidi
//     controls U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C, the
//     zero-width characters U+200B–U+200D, U+2060 and U+FEFF, and the
//     tag characters U+E0000–U+E007F;
//   - control characters (Cc), except line feed and tab in free text
//     (Mode FreeText), where they only break lines and indent, which the
//     page shows as such;
//   - line and paragraph separators (Zl, Zp);
//   - variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF, the Mongolian
//     U+180B–U+180D, U+180F), which change how the previous character
//     looks;
//   - the other default-ignorable code points
//     (Other_Default_Ignorable_Code_Point: the combining grapheme joiner
//     U+034F, the Khmer vowels U+17B4 and U+17B5, the Hangul fillers
//     U+115F, U+1160, U+3164, U+FFA0, reserved tag-plane code points), and
//     U+2800, which renders as blank;
//   - surrogate and private-use code points and noncharacters;
//   - text not in Unicode Normalization Form C: a decomposed "é" (e +
//     U+0301) looks like the composed one but has other bytes and another
//     digest. Each code point of a segment that NFC would change is
//     escaped, except a first base character that NFC leaves alone.
//
// The escapes' own opening bracket ⟨ (and its look-alikes U+3008 and
// U+2329) is escaped too when the text holds it, so that a literal
// "⟨U+202E⟩" cannot pass for an escape; it is not hidden, so Find, which
// refuses hidden characters, lets it through.
package visible

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Kind classifies a hidden code point.
type Kind string

// The kinds of hidden code points, as Reveal's warning names them.
const (
	Bidi      Kind = "direction control"
	Invisible Kind = "invisible character"
	Control   Kind = "control character"
	Separator Kind = "line or paragraph separator"
	Variation Kind = "variation selector"
	Unusual   Kind = "private-use or non-character"
	NotNFC    Kind = "non-NFC (decomposed) character"
	// Lookalike is an opening bracket the escapes themselves begin with:
	// text holding it could pass off a literal "⟨U+202E⟩" as an escape.
	Lookalike Kind = "escape bracket written in the text"
	BadUTF8   Kind = "invalid UTF-8"
)

// Mode says whether line feeds and tabs are allowed (FreeText: the agent's
// context) or escaped like any control character (Strict: machine values,
// display values, names).
type Mode int

// Modes.
const (
	Strict Mode = iota
	FreeText
)

// Finding is one hidden code point: where it is (byte offset in the
// input), which it is and why it is hidden.
type Finding struct {
	Offset int
	Rune   rune
	Kind   Kind
}

// Escape is how a finding is shown: ⟨U+XXXX⟩.
func (f Finding) Escape() string { return Escape(f.Rune) }

// Escape renders one code point as ⟨U+XXXX⟩.
func Escape(r rune) string { return fmt.Sprintf("⟨U+%04X⟩", r) }

// Text is a string made safe to show, with what was found in it.
type Text struct {
	// Shown is the input with every hidden code point replaced by its
	// escape; it equals the input when Findings is empty.
	Shown    string
	Findings []Finding
}

// Hidden reports whether anything was found.
func (t Text) Hidden() bool { return len(t.Findings) > 0 }

// Warning says, in one sentence for a reviewer, what was found ("" when
// nothing was), naming each kind once with its distinct code points, e.g.
// "Hidden characters shown as ⟨U+…⟩: direction controls (U+202E, U+202C),
// invisible character (U+200B). …"
func (t Text) Warning() string { return Warning(t.Findings) }

// Warning is Text.Warning for findings gathered from several texts.
func Warning(fs []Finding) string {
	if len(fs) == 0 {
		return ""
	}
	var order []Kind
	byKind := map[Kind][]string{}
	for _, f := range fs {
		if _, ok := byKind[f.Kind]; !ok {
			order = append(order, f.Kind)
		}
		code := fmt.Sprintf("U+%04X", f.Rune)
		if !contains(byKind[f.Kind], code) {
			byKind[f.Kind] = append(byKind[f.Kind], code)
		}
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		name := string(k)
		if len(byKind[k]) != 1 {
			name += "s"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", name, strings.Join(byKind[k], ", ")))
	}
	return "Hidden characters shown as ⟨U+…⟩: " + strings.Join(parts, ", ") +
		". The text does not look elsewhere the way it is shown here; read the escapes before you decide."
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Classify reports whether r alone is hidden in mode, and why. Non-NFC
// text is a property of sequences; Reveal and Find check it too.
func Classify(r rune, mode Mode) (Kind, bool) {
	switch {
	case r == '\n' || r == '\t':
		if mode == FreeText {
			return "", false
		}
		return Control, true
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F, r == 0x061C:
		return Bidi, true
	case unicode.Is(unicode.Variation_Selector, r):
		return Variation, true
	case unicode.Is(unicode.Cc, r):
		return Control, true
	case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), r == 0x2800:
		return Invisible, true
	case unicode.In(r, unicode.Zl, unicode.Zp):
		return Separator, true
	case unicode.In(r, unicode.Co, unicode.Cs), unicode.Is(unicode.Noncharacter_Code_Point, r):
		return Unusual, true
	case r == 0x27E8, r == 0x3008, r == 0x2329:
		return Lookalike, true
	}
	return "", false
}

// Reveal returns s with every hidden code point escaped, and the findings.
// Invalid UTF-8 bytes are escaped as ⟨0xNN⟩.
func Reveal(s string, mode Mode) Text {
	var b strings.Builder
	var fs []Finding
	for i := 0; i < len(s); {
		n := norm.NFC.NextBoundaryInString(s[i:], true)
		if n <= 0 {
			n = len(s) - i
		}
		seg := s[i : i+n]
		nfc := norm.NFC.IsNormalString(seg)
		first := true
		for j := 0; j < len(seg); {
			r, size := utf8.DecodeRuneInString(seg[j:])
			off := i + j
			j += size
			if r == utf8.RuneError && size == 1 {
				fs = append(fs, Finding{Offset: off, Rune: rune(seg[j-1]), Kind: BadUTF8})
				fmt.Fprintf(&b, "⟨0x%02X⟩", seg[j-1])
				first = false
				continue
			}
			if k, hidden := Classify(r, mode); hidden {
				fs = append(fs, Finding{Offset: off, Rune: r, Kind: k})
				b.WriteString(Escape(r))
			} else if !nfc && !(first && norm.NFC.IsNormalString(string(r))) {
				fs = append(fs, Finding{Offset: off, Rune: r, Kind: NotNFC})
				b.WriteString(Escape(r))
			} else {
				b.WriteRune(r)
			}
			first = false
		}
		i += n
	}
	if len(fs) == 0 {
		return Text{Shown: s}
	}
	return Text{Shown: b.String(), Findings: fs}
}

// Find returns the first hidden code point of s in mode, if any: what
// Reveal would escape first, brackets like the escapes' own (Lookalike)
// aside, which are visible and only escaped to keep the notation
// unambiguous.
func Find(s string, mode Mode) (Finding, bool) {
	for _, f := range Reveal(s, mode).Findings {
		if f.Kind != Lookalike {
			return f, true
		}
	}
	return Finding{}, false
}
