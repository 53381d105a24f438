package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// escape makes s safe to print on a terminal and in a line-oriented table:
// every byte sequence that is not valid UTF-8 becomes \xNN, every rune that
// is not printable (control characters such as \t, \n, \r and ESC, Unicode
// format characters such as bidi overrides, line and paragraph separators)
// gets its Go escape (\t, \n, \x1b, \u202e), and a backslash is doubled so
// that an escape in the output is never ambiguous with the same text stored
// literally. Printable text, spaces included, is returned unchanged. Values
// from stores, host-local files, CRI and file names pass through it before
// they reach a table or a message; JSON output is exact and never escaped
// this way.
func escape(s string) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// isPlain reports whether escape would return s unchanged.
func isPlain(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\\' || r != ' ' && !unicode.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}

// printf writes a formatted line with every byte of it escaped, then a
// newline: the way every plain-text line of the CLI reaches its reader.
func printf(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, escape(fmt.Sprintf(format, args...)))
}
