package deadletter

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// An Edit changes a dead letter's headers as it is replayed, to mend what made it dead (an
// Admit-Weight that was not a weight, say). The zero Edit changes nothing. Header names are
// matched without regard to case, as the admitter reads Admit-Weight: setting a header
// replaces every spelling of its name, dropping one removes every spelling.
//
// The replay's own headers cannot be edited: Nats-* (directives to the server; the replay
// sets its own Nats-Msg-Id), Admit-Replay-Of (which dead letter it was replayed from), and
// Admit-Error and the Admit-Error-* headers (why it was dead, which a replay removes).
type Edit struct {
	// Set is each header to set, by name, to its one value.
	Set map[string]string `json:"set,omitempty"`
	// Drop names each header to remove. In a replay's record: those the dead letter had.
	Drop []string `json:"drop,omitempty"`
}

// IsZero reports whether e changes nothing.
func (e Edit) IsZero() bool { return len(e.Set) == 0 && len(e.Drop) == 0 }

// String is the edit in the CLI's terms, sorted: "set Admit-Weight=2; drop X-Bad".
func (e Edit) String() string {
	var parts []string
	if len(e.Set) > 0 {
		var set []string
		for _, k := range slices.Sorted(maps.Keys(e.Set)) {
			set = append(set, k+"="+e.Set[k])
		}
		parts = append(parts, "set "+strings.Join(set, ", "))
	}
	if len(e.Drop) > 0 {
		parts = append(parts, "drop "+strings.Join(slices.Sorted(slices.Values(e.Drop)), ", "))
	}
	return strings.Join(parts, "; ")
}

// Validate checks every name and value: a header name (letters, digits and !#$%&'*+-.^_`|~), not
// one of the replay's own headers, named at most once across Set and Drop; a value without
// control characters (tab allowed). The error wraps ErrEdit and names the header.
func (e Edit) Validate() error {
	var seen []string
	check := func(name string) error {
		if err := checkEditable(name); err != nil {
			return err
		}
		if i := slices.IndexFunc(seen, func(s string) bool { return strings.EqualFold(s, name) }); i >= 0 {
			return fmt.Errorf("%w: header %s is named twice (as %s and %s; names are matched without regard to case)", ErrEdit, name, seen[i], name)
		}
		seen = append(seen, name)
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(e.Set)) {
		if err := check(name); err != nil {
			return err
		}
		if err := checkValue(name, e.Set[name]); err != nil {
			return err
		}
	}
	for _, name := range e.Drop {
		if err := check(name); err != nil {
			return err
		}
	}
	return nil
}

// ParseSetHeader reads a "Name=Value" of --set-header: the value is everything after the first
// '=' (it may be empty, and may hold '='). The name and value are checked as Validate does.
func ParseSetHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not Name=Value (e.g. Admit-Weight=2)", ErrEdit, s)
	}
	if err := checkEditable(name); err != nil {
		return "", "", err
	}
	if err := checkValue(name, value); err != nil {
		return "", "", err
	}
	return name, value, nil
}

// checkEditable: name is a header name a replay may set or drop.
func checkEditable(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty header name", ErrEdit)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("%w: header name %q: %q at byte %d is not allowed (letters, digits and !#$%%&'*+-.^_`|~ only)", ErrEdit, name, name[i], i)
		}
	}
	switch {
	case len(name) >= 5 && strings.EqualFold(name[:5], "Nats-"):
		return fmt.Errorf("%w: header %s: Nats-* headers are directives to the NATS server, not the job's; a replay sets its own %s and passes no other", ErrEdit, name, nats.MsgIdHdr)
	case strings.EqualFold(name, wire.HeaderReplayOf):
		return fmt.Errorf("%w: header %s names the dead letter the job is replayed from: the replay sets it", ErrEdit, name)
	case isErrorHeader(name):
		return fmt.Errorf("%w: header %s says why the job was dead-lettered: a replay removes it", ErrEdit, name)
	}
	return nil
}

// checkValue: v can be carried in a NATS header.
func checkValue(name, v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("%w: header %s: its value holds the control character %q at byte %d", ErrEdit, name, c, i)
		}
	}
	return nil
}

// isTokenChar reports whether c may appear in a header name (RFC 9110's token).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// apply changes h (a replay's headers) by e and returns the edit as applied: Set whole, Drop
// only the names h had.
func (e Edit) apply(h nats.Header) Edit {
	del := func(name string) bool {
		found := false
		for k := range h {
			if strings.EqualFold(k, name) {
				delete(h, k)
				found = true
			}
		}
		return found
	}
	var done Edit
	for _, name := range e.Drop {
		if del(name) {
			done.Drop = append(done.Drop, name)
		}
	}
	for name, v := range e.Set {
		del(name)
		h[name] = []string{v}
	}
	if len(e.Set) > 0 {
		done.Set = maps.Clone(e.Set)
	}
	return done
}
