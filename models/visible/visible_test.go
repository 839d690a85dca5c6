package visible_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/countersign/countersign/models/visible"
)

func TestReveal(t *testing.T) {
	tests := []struct {
		name, in string
		mode     visible.Mode
		want     string
		kinds    []visible.Kind
	}{
		{"plain", "Refund of ¥199.00, 退款", visible.Strict, "Refund of ¥199.00, 退款", nil},
		{"right-to-left override", "Refund \u202E00.991¥", visible.Strict, "Refund ⟨U+202E⟩00.991¥", []visible.Kind{visible.Bidi}},
		{"isolates and marks", "a\u2066b\u2069c\u200Fd\u061C", visible.Strict, "a⟨U+2066⟩b⟨U+2069⟩c⟨U+200F⟩d⟨U+061C⟩",
			[]visible.Kind{visible.Bidi, visible.Bidi, visible.Bidi, visible.Bidi}},
		{"zero width space", "ord\u200B_1001", visible.Strict, "ord⟨U+200B⟩_1001", []visible.Kind{visible.Invisible}},
		{"byte order mark, word joiner, tag", "\uFEFFa\u2060\U000E0041", visible.Strict, "⟨U+FEFF⟩a⟨U+2060⟩⟨U+E0041⟩",
			[]visible.Kind{visible.Invisible, visible.Invisible, visible.Invisible}},
		{"hangul filler", "x\u3164y", visible.Strict, "x⟨U+3164⟩y", []visible.Kind{visible.Invisible}},
		{"variation selector", "A\uFE0F", visible.Strict, "A⟨U+FE0F⟩", []visible.Kind{visible.Variation}},
		{"line separator", "a\u2028b\u2029", visible.Strict, "a⟨U+2028⟩b⟨U+2029⟩", []visible.Kind{visible.Separator, visible.Separator}},
		{"controls strict", "a\nb\tc\x07\r", visible.Strict, "a⟨U+000A⟩b⟨U+0009⟩c⟨U+0007⟩⟨U+000D⟩",
			[]visible.Kind{visible.Control, visible.Control, visible.Control, visible.Control}},
		{"free text keeps lines and tabs", "a\nb\tc\r\x1b", visible.FreeText, "a\nb\tc⟨U+000D⟩⟨U+001B⟩",
			[]visible.Kind{visible.Control, visible.Control}},
		{"decomposed é", "Cafe\u0301", visible.Strict, "Cafe⟨U+0301⟩", []visible.Kind{visible.NotNFC}},
		{"composed é is fine", "Caf\u00E9", visible.Strict, "Caf\u00E9", nil},
		{"angstrom sign", "\u212B", visible.Strict, "⟨U+212B⟩", []visible.Kind{visible.NotNFC}},
		{"private use", "\uE000", visible.Strict, "⟨U+E000⟩", []visible.Kind{visible.Unusual}},
		{"invalid UTF-8", "a\xffb", visible.Strict, "a⟨0xFF⟩b", []visible.Kind{visible.BadUTF8}},
		{"combining grapheme joiner", "a\u034Fb", visible.Strict, "a⟨U+034F⟩b", []visible.Kind{visible.Invisible}},
		{"khmer inherent vowels", "x\u17B4y\u17B5", visible.Strict, "x⟨U+17B4⟩y⟨U+17B5⟩", []visible.Kind{visible.Invisible, visible.Invisible}},
		// A literal escape is not taken for one: its bracket is escaped.
		{"escape written in the text", "spoof ⟨U+202E⟩ literal", visible.Strict, "spoof ⟨U+27E8⟩U+202E⟩ literal", []visible.Kind{visible.Lookalike}},
		{"look-alike brackets", "\u3008U+202E\u3009", visible.Strict, "⟨U+3008⟩U+202E\u3009", []visible.Kind{visible.Lookalike}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := visible.Reveal(tt.in, tt.mode)
			if got.Shown != tt.want {
				t.Errorf("Shown = %q, want %q", got.Shown, tt.want)
			}
			var kinds []visible.Kind
			for _, f := range got.Findings {
				kinds = append(kinds, f.Kind)
			}
			if strings.Join(kindStrings(kinds), ",") != strings.Join(kindStrings(tt.kinds), ",") {
				t.Errorf("kinds = %v, want %v", kinds, tt.kinds)
			}
			if got.Hidden() != (len(tt.kinds) > 0) || (got.Warning() == "") == got.Hidden() {
				t.Errorf("Hidden %v, Warning %q", got.Hidden(), got.Warning())
			}
			// Find reports what is hidden; an escape's own bracket is
			// escaped in display only.
			hidden := false
			for _, k := range tt.kinds {
				hidden = hidden || k != visible.Lookalike
			}
			if _, found := visible.Find(tt.in, tt.mode); found != hidden {
				t.Errorf("Find = %v, want %v", found, hidden)
			}
		})
	}
}

// Every code point of the categories the rule names is escaped: nothing
// of Cf, Cc (but \n and \t in free text), Zl or Zp gets through as itself.
func TestEveryFormatAndControlCharacterIsEscaped(t *testing.T) {
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		cat := category(r)
		if cat == "" {
			continue
		}
		s := "a" + string(r) + "b"
		got := visible.Reveal(s, visible.FreeText)
		free := r == '\n' || r == '\t'
		if free == got.Hidden() {
			t.Errorf("U+%04X (%s): hidden = %v", r, cat, got.Hidden())
		}
		if !free && !strings.Contains(got.Shown, visible.Escape(r)) {
			t.Errorf("U+%04X (%s) shown as %q", r, cat, got.Shown)
		}
	}
}

// Every default-ignorable code point that is not a format character
// (Other_Default_Ignorable_Code_Point: the combining grapheme joiner, the
// Khmer inherent vowels, the Hangul fillers, reserved tag-plane code
// points …) renders as nothing in most fonts, so it is escaped too.
func TestEveryDefaultIgnorableIsEscaped(t *testing.T) {
	for r := rune(0); r <= 0x10FFFF; r++ {
		if !unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) {
			continue
		}
		got := visible.Reveal("a"+string(r)+"b", visible.Strict)
		if !got.Hidden() || !strings.Contains(got.Shown, visible.Escape(r)) {
			t.Errorf("U+%04X shown as %q", r, got.Shown)
		}
		if _, found := visible.Find("a"+string(r)+"b", visible.Strict); !found {
			t.Errorf("Find misses U+%04X", r)
		}
	}
}

func TestWarningNamesWhatWasFound(t *testing.T) {
	got := visible.Reveal("Refund \u202E00.991¥\u202C \u200B \u200B", visible.Strict).Warning()
	for _, want := range []string{"direction controls (U+202E, U+202C)", "invisible character (U+200B)", "⟨U+…⟩"} {
		if !strings.Contains(got, want) {
			t.Errorf("warning %q lacks %q", got, want)
		}
	}
}

func TestLoneSurrogate(t *testing.T) {
	tests := []struct {
		in     string
		offset int
		found  bool
	}{
		{`{"a":"\ud800"}`, 6, true},
		{`{"a":"\uDC00x"}`, 6, true},
		{`{"a":"x\ud83dy"}`, 7, true},
		{`{"a":"\ud83d\u0041"}`, 6, true},
		{`{"a":"\ud83d\ude00"}`, 0, false}, // a pair: 😀
		{`{"a":"\\ud800"}`, 0, false},      // an escaped backslash, then text
		{`{"a":"\\\ud800"}`, 8, true},
		{`{"a":"\u00e9\n\"\ud800"}`, 16, true},
		{`{"a":"plain"}`, 0, false},
		{`{"a":"\ud800`, 6, true},
	}
	for _, tt := range tests {
		off, found := visible.LoneSurrogate([]byte(tt.in))
		if found != tt.found || (found && off != tt.offset) {
			t.Errorf("LoneSurrogate(%s) = %d, %v; want %d, %v", tt.in, off, found, tt.offset, tt.found)
		}
	}
}
