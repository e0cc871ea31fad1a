package wire

import (
	"strconv"
	"unicode/utf8"
)

// The answers' bodies are written by hand: they are small, there is one per decision, and
// encoding/json would reflect over them and box them each time. The output is what
// encoding/json writes with SetEscapeHTML(false) (FuzzAppendJSONString holds them together).

// AppendJSON appends d as a JSON object, the fields in declaration order.
func (d Decision) AppendJSON(b []byte) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"tenant":`...)
	b = appendJSONString(b, d.Tenant)
	b = append(b, `,"plan":`...)
	b = appendJSONString(b, d.Plan)
	b = append(b, `,"limit":`...)
	b = appendJSONString(b, d.Limit)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"wait_ms":`...)
	b = strconv.AppendInt(b, d.WaitMs, 10)
	if d.Reserved {
		b = append(b, `,"reserved":true`...)
	}
	if d.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if d.Shadow != "" {
		b = append(b, `,"shadow":`...)
		b = appendJSONString(b, d.Shadow)
	}
	return append(b, '}')
}

// MarshalJSON is AppendJSON for encoding/json.
func (d Decision) MarshalJSON() ([]byte, error) { return d.AppendJSON(nil), nil }

// AppendJSON appends e as a JSON object.
func (e ErrorBody) AppendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendJSONString(b, string(e.Error))
	b = append(b, `,"detail":`...)
	b = appendJSONString(b, e.Detail)
	if e.WaitMs != 0 {
		b = append(b, `,"wait_ms":`...)
		b = strconv.AppendInt(b, e.WaitMs, 10)
	}
	return append(b, '}')
}

// MarshalJSON is AppendJSON for encoding/json.
func (e ErrorBody) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string as encoding/json writes it without HTML
// escaping: '"', '\' and control characters escaped, invalid UTF-8 as U+FFFD, U+2028 and
// U+2029 escaped (JavaScript reads them as line ends).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
