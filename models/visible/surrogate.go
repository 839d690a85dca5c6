package visible

// LoneSurrogate reports the byte offset of the first \u escape in JSON text
// that names half of a UTF-16 surrogate pair without its other half
// ("\ud800", "\udc00", a high half followed by anything but a low one).
// encoding/json silently turns such an escape into U+FFFD, so a value the
// agent sent would not be the value stored; callers refuse it instead
// (EInvalidRequest). Only escapes are looked at: raw bytes are checked by
// UTF-8 validation.
func LoneSurrogate(jsonText []byte) (offset int, found bool) {
	for i := 0; i < len(jsonText); i++ {
		if jsonText[i] != '\\' {
			continue
		}
		if i+1 >= len(jsonText) {
			return 0, false
		}
		if jsonText[i+1] != 'u' {
			i++ // \\, \", \n …: skip the escaped character
			continue
		}
		u, ok := hex4(jsonText, i+2)
		if !ok {
			i++
			continue
		}
		switch {
		case u >= 0xDC00 && u <= 0xDFFF:
			return i, true
		case u >= 0xD800 && u <= 0xDBFF:
			if i+7 < len(jsonText) && jsonText[i+6] == '\\' && jsonText[i+7] == 'u' {
				if lo, ok := hex4(jsonText, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // the whole pair
					continue
				}
			}
			return i, true
		}
		i += 5
	}
	return 0, false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
