package netconf

import (
	"encoding/json"
	"slices"
	"strings"
)

// reader reads a JSON document byte by byte for decodeFast. It accepts only
// valid JSON (RFC 8259, as encoding/json's scanner checks it) and, where a
// value is decoded rather than skipped, only the plainest spelling of it; ok
// turns false, for good, at the first byte it does not take, and the caller
// then falls back to json.Unmarshal.
type reader struct {
	b     []byte
	i     int // next byte to read
	ok    bool
	depth int
	// seen holds the keys read so far of each object being read, outermost first.
	seen []string
	// unknown collects the keys objectAt skipped, as JSON paths.
	unknown []string
}

// maxDepth bounds the nesting the reader takes (encoding/json's bound is
// 10 000); deeper documents are left to json.Unmarshal.
const maxDepth = 200

func newReader(b []byte) *reader {
	return &reader{b: b, ok: true, seen: make([]string, 0, 32)}
}

// peek skips white space and returns the next byte, or 0 at the end.
func (r *reader) peek() byte {
	for ; r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

// expect consumes the byte want (after white space), or fails.
func (r *reader) expect(want byte) {
	if r.ok && r.peek() == want {
		r.i++
		return
	}
	r.ok = false
}

// end reports whether only white space is left.
func (r *reader) end() bool { return r.ok && r.peek() == 0 && r.i == len(r.b) }

// open consumes the delimiter that starts a container and counts its depth.
func (r *reader) open(delim byte) {
	r.expect(delim)
	if r.depth++; r.depth > maxDepth {
		r.ok = false
	}
}

// more reports whether the container being read has another member, consuming
// the separator before it (first is true before the first member) or the
// delimiter closing it.
func (r *reader) more(first bool, closing byte) bool {
	if !r.ok {
		return false
	}
	switch c := r.peek(); {
	case c == closing:
		r.i++
		r.depth--
		return false
	case first:
		return true
	case c == ',':
		r.i++
		return true
	}
	r.ok = false
	return false
}

// object reads an object, calling value for each key in fields (exactly as
// spelt; every key when fields is nil) to read its value. Other keys' values
// are skipped, as json.Unmarshal ignores unknown keys; a key equal to a field
// name but for case, a key seen twice (json.Unmarshal would match or merge
// them), or a key that is not plain ASCII ends the fast path.
func (r *reader) object(fields []string, value func(key string)) {
	r.objectAt(nil, fields, value)
}

// objectAt is object for an object whose keys the user writes (the ipam
// section): each key it skips is added to r.unknown as path()+"."+key.
// A nil path records nothing.
func (r *reader) objectAt(path func() string, fields []string, value func(key string)) {
	r.open('{')
	base := len(r.seen) // this object's keys are r.seen[base:]
	defer func() { r.seen = r.seen[:base] }()
	for first := true; r.more(first, '}'); first = false {
		key := r.str()
		r.expect(':')
		if !r.ok || slices.Contains(r.seen[base:], key) {
			r.ok = false
			return
		}
		r.seen = append(r.seen, key)
		switch {
		case fields == nil || slices.Contains(fields, key):
			value(key)
		case slices.ContainsFunc(fields, func(f string) bool { return strings.EqualFold(f, key) }):
			r.ok = false
		default:
			if path != nil {
				r.unknown = append(r.unknown, path()+"."+key)
			}
			r.skip()
		}
	}
}

// array reads an array, calling elem for each element.
func (r *reader) array(elem func()) {
	r.open('[')
	for first := true; r.more(first, ']'); first = false {
		elem()
	}
}

// str reads a string of printable ASCII without escapes: its bytes are the
// value json.Unmarshal decodes. Anything else ends the fast path.
func (r *reader) str() string {
	r.expect('"')
	start := r.i
	for ; r.ok && r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; {
		case c == '"':
			r.i++
			return string(r.b[start : r.i-1])
		case c < 0x20 || c >= 0x80 || c == '\\':
			r.ok = false
		}
	}
	r.ok = false
	return ""
}

// boolean reads true or false.
func (r *reader) boolean() *bool {
	var b bool
	switch r.peek() {
	case 't':
		b = true
		r.literal("true")
	default:
		r.literal("false")
	}
	return &b
}

func (r *reader) literal(word string) {
	if r.ok && len(r.b)-r.i >= len(word) && string(r.b[r.i:r.i+len(word)]) == word {
		r.i += len(word)
		return
	}
	r.ok = false
}

// skip reads one value of any kind, checking its syntax only.
func (r *reader) skip() {
	switch c := r.peek(); {
	case !r.ok:
	case c == '{':
		r.open('{')
		for first := true; r.more(first, '}'); first = false {
			r.skipString()
			r.expect(':')
			r.skip()
		}
	case c == '[':
		r.array(r.skip)
	case c == '"':
		r.skipString()
	case c == 't':
		r.literal("true")
	case c == 'f':
		r.literal("false")
	case c == 'n':
		r.literal("null")
	default:
		r.number()
	}
}

// skipString reads a string of any content JSON allows: no control
// characters, and only JSON's escapes.
func (r *reader) skipString() {
	r.expect('"')
	for r.ok && r.i < len(r.b) {
		c := r.b[r.i]
		r.i++
		switch {
		case c == '"':
			return
		case c < 0x20:
			r.ok = false
		case c == '\\':
			r.escape()
		}
	}
	r.ok = false
}

// escape reads what follows a backslash in a string.
func (r *reader) escape() {
	if r.i >= len(r.b) {
		r.ok = false
		return
	}
	c := r.b[r.i]
	r.i++
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
	case 'u':
		for range 4 {
			if r.i >= len(r.b) || !isHex(r.b[r.i]) {
				r.ok = false
				return
			}
			r.i++
		}
	default:
		r.ok = false
	}
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// number reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *reader) number() {
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case r.i < len(r.b) && '1' <= r.b[r.i] && r.b[r.i] <= '9':
		r.digits()
	default:
		r.ok = false
		return
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		r.digits()
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		r.digits()
	}
}

// digits reads one digit or more.
func (r *reader) digits() {
	start := r.i
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		r.i++
	}
	if r.i == start {
		r.ok = false
	}
}

// hasTopLevelKey reports whether the JSON object stdin, which json.Unmarshal
// decoded, has a key it matches to the field name: one equal to it but for
// case (encoding/json folds names as strings.EqualFold does).
func hasTopLevelKey(stdin []byte, name string) bool {
	r := newReader(stdin)
	found := false
	r.open('{')
	for first := true; r.more(first, '}'); first = false {
		r.peek()
		from := r.i
		r.skipString()
		var key string
		if !r.ok || json.Unmarshal(r.b[from:r.i], &key) != nil {
			return false
		}
		found = found || strings.EqualFold(key, name)
		r.expect(':')
		r.skip()
	}
	return found
}
