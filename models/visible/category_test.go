package visible_test

import "unicode"

func category(r rune) string {
	switch {
	case unicode.Is(unicode.Cf, r):
		return "Cf"
	case unicode.Is(unicode.Cc, r):
		return "Cc"
	case unicode.Is(unicode.Zl, r):
		return "Zl"
	case unicode.Is(unicode.Zp, r):
		return "Zp"
	case unicode.Is(unicode.Variation_Selector, r):
		return "variation selector"
	case unicode.Is(unicode.Bidi_Control, r):
		return "bidi control"
	}
	return ""
}

func kindStrings[K ~string](ks []K) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}
