package subjects

import "testing"

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		outer, inner string
		want         bool
	}{
		{"jobs.admitted.*.>", "jobs.admitted.*.>", true},
		{"jobs.>", "jobs.admitted.*.>", true},
		{">", "jobs.admitted.*.>", true},
		{"jobs.*.*.>", "jobs.admitted.*.>", true},
		{"jobs.admitted.*.*", "jobs.admitted.*.>", false},
		{"jobs.admitted.acme.>", "jobs.admitted.*.>", false},
		{"jobs.dead.*.>", "jobs.admitted.*.>", false},
		{"jobs.admitted.*", "jobs.admitted.*.>", false},
		{"jobs.admitted.*.>", "jobs.admitted.*", false},
		{"jobs.admitted.*.>", "jobs.admitted.acme.x", true},
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.b.c", "a.b", false},
		{"a.*", "a.b", true},
		{"", "a", false},
		{"a..b", "a..b", false},
		{"a.>.b", "a.x.b", false},
	} {
		if got := Covers(tc.outer, tc.inner); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tc.outer, tc.inner, got, tc.want)
		}
		// whatever Covers says, a covered filter always overlaps its cover
		if Covers(tc.outer, tc.inner) && !Overlap(tc.outer, tc.inner) {
			t.Errorf("Covers(%q, %q) but they do not overlap", tc.outer, tc.inner)
		}
	}
}
