package subjects

import (
	"strings"
	"testing"
)

func TestOverlap(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		// The configurations the service checks.
		{"jobs.submit.*.>", "jobs.admitted.*.>", false},
		{"jobs.submit.*.>", "jobs.dead.*.>", false},
		{"jobs.submit.*.>", "jobs.submit.*.>", true},
		{"jobs.*.*.>", "jobs.admitted.*.>", true},
		{"jobs.>", "jobs.admitted.*.>", true},
		{"*.*.>", "jobs.admitted.*", true},
		{"jobs.submit.*", "jobs.submit.*.>", false},
		{"jobs.submit.*.>", "jobs.submit.*", false},
		// Literals and single-token wildcards.
		{"a", "a", true},
		{"a", "b", false},
		{"a.b", "a", false},
		{"a", "a.b", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"a.*", "*.b", true},
		{"a.*", "b.*", false},
		{"a.*", "a.*.*", false},
		{"a*", "a", false},   // "a*" is a literal
		{"a*", "a*", true},   // and matches itself
		{"a>", "a.>", false}, // so is "a>"
		// Full wildcards.
		{">", "a", true},
		{">", "a.b.c", true},
		{">", "*", true},
		{">", ">", true},
		{"a.>", "a", false},
		{"a.>", "a.b", true},
		{"a.>", "*.*.*", true},
		{"a.>", "b.>", false},
		{"a.b.>", "a.>", true},
		{"a.>", "*.c.>", true},
		// Invalid filters overlap nothing, not even themselves.
		{"", "", false},
		{"", ">", false},
		{".", ">", false},
		{"a..b", ">", false},
		{"a.", ">", false},
		{">.a", ">", false},
		{"a.>.b", "a.>.b", false},
		{"a b", ">", false},
		{"a.\tb", ">", false},
	}
	for _, tt := range tests {
		if got := Overlap(tt.a, tt.b); got != tt.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := Overlap(tt.b, tt.a); got != tt.want {
			t.Errorf("Overlap(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

// TestOverlapExhaustive compares Overlap with a search for a common subject, over all small
// filters. Subjects of up to 4 tokens from {a, b, c} suffice: the filters have at most 3
// tokens, and "c" stands for any token the filters do not name.
func TestOverlapExhaustive(t *testing.T) {
	filters := sequences([]string{"a", "b", "*", ">", "", "x y"}, 3)
	subjects := sequences([]string{"a", "b", "c"}, 4)
	joined := make([]string, len(filters))
	for i, f := range filters {
		joined[i] = strings.Join(f, ".")
	}
	for i, fa := range filters {
		for j, fb := range filters {
			want := false
			for _, s := range subjects {
				if refMatchFilter(fa, s) && refMatchFilter(fb, s) {
					want = true
					break
				}
			}
			if got := Overlap(joined[i], joined[j]); got != want {
				t.Errorf("Overlap(%q, %q) = %v, want %v", joined[i], joined[j], got, want)
			}
		}
	}
}

// sequences returns every sequence of 1 to n elements of alphabet.
func sequences(alphabet []string, n int) [][]string {
	var out [][]string
	prev := [][]string{nil}
	for range n {
		var next [][]string
		for _, p := range prev {
			for _, a := range alphabet {
				next = append(next, append(p[:len(p):len(p)], a))
			}
		}
		out = append(out, next...)
		prev = next
	}
	return out
}

// refMatchFilter is the NATS matching rule, written plainly: whether the concrete subject with
// (valid) tokens subject matches the filter with tokens filter.
func refMatchFilter(filter, subject []string) bool {
	for i, f := range filter {
		switch {
		case f == ">":
			return i == len(filter)-1 && len(subject) > i
		case i >= len(subject):
			return false
		case f == "*":
			if !refValidToken(subject[i]) {
				return false
			}
		case f != subject[i]:
			return false
		}
	}
	return len(subject) == len(filter)
}

// refValidToken is the package's rule for a single concrete subject token, written plainly.
func refValidToken(s string) bool {
	return s != "" && s != "*" && s != ">" && !strings.ContainsAny(s, ". \t\n\f\r")
}
