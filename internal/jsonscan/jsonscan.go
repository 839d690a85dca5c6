// Package jsonscan walks the structure of a JSON text byte by byte — its
// containers and the member names of its objects — without decoding it.
// The strict decoders use it to tell, cheaply, what encoding/json cannot
// say: how many members the text names (a name given twice decodes to one
// key), how deep it nests, and which names an object spells.
package jsonscan

// Visitor receives a text's structure; a nil function is not called, and
// one that returns false stops the walk.
type Visitor struct {
	// Open is called at each '{' (object) or '[' with the depth of the
	// container it opens (1 for the outermost).
	Open func(depth int, object bool) bool
	// Close is called at each '}' or ']' with the depth of the container
	// it closes.
	Close func(depth int) bool
	// Name is called for each member name with the depth of the object
	// naming it, its raw bytes between the quotes (escapes not decoded:
	// escaped reports whether they hold one).
	Name func(depth int, raw []byte, escaped bool) bool
}

// Walk walks text and reports whether it reached the end with every
// container closed and no string open, and the visitor never stopped it. It
// is not a validator: a text it walks to the end may still not be JSON
// (callers check that with encoding/json); for JSON it reports exactly its
// containers and member names.
func Walk(text []byte, v Visitor) bool {
	var buf [64]bool
	objects := buf[:0] // whether each open container is an object
	inString, escaped, wantName, isName, hasEscape := false, false, false, false, false
	start := 0
	for i, c := range text {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped, hasEscape = true, true
			case c == '"':
				inString = false
				if isName && v.Name != nil && !v.Name(len(objects), text[start:i], hasEscape) {
					return false
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, isName, hasEscape, start = true, wantName, false, i+1
			wantName = false
		case '{', '[':
			objects = append(objects, c == '{')
			wantName = c == '{'
			if v.Open != nil && !v.Open(len(objects), c == '{') {
				return false
			}
		case '}', ']':
			if len(objects) == 0 {
				return false
			}
			if v.Close != nil && !v.Close(len(objects)) {
				return false
			}
			objects = objects[:len(objects)-1]
			wantName = false
		case ',':
			wantName = len(objects) > 0 && objects[len(objects)-1]
		}
	}
	return !inString && len(objects) == 0
}
