package admission

import (
	"strings"
	"testing"
	"time"
)

// TestUnmappedEpisodes: jobs left in an older stream from before are not an episode; the first
// job stored there after starts one (said once), more jobs keep it going, and a quiet
// unmappedQuiet ends it (said once); a later job starts another.
func TestUnmappedEpisodes(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var u unmapped
	u.from("JOBS", 40) // 40 jobs stored before set-up
	type step struct {
		stream         string
		last           uint64
		at             time.Duration
		started, ended bool
		now            string // what Detail would say (a part of it)
	}
	for i, s := range []step{
		{"JOBS", 40, 0, false, false, ""},
		{"JOBS_2_1", 7, time.Second, false, false, ""}, // first seen: what it holds is from before
		{"JOBS", 41, 2 * time.Second, true, false, "1 jobs stored in stream JOBS since 2026-11-28T12:00:02Z"},
		{"JOBS", 45, 3 * time.Second, false, false, "5 jobs stored in stream JOBS since 2026-11-28T12:00:02Z, the latest at 2026-11-28T12:00:03Z"},
		{"JOBS_2_1", 8, 4 * time.Second, true, false, "; 1 jobs stored in stream JOBS_2_1"},
		{"JOBS", 45, 3*time.Second + unmappedQuiet - time.Millisecond, false, false, "5 jobs stored in stream JOBS"},
		{"JOBS", 45, 3*time.Second + unmappedQuiet, false, true, "1 jobs stored in stream JOBS_2_1"},
		{"JOBS", 45, 2 * unmappedQuiet, false, false, "1 jobs stored in stream JOBS_2_1"},
		{"JOBS", 46, 3 * unmappedQuiet, true, false, "1 jobs stored in stream JOBS since 2026-11-28T12:03:00Z"},
	} {
		started, ended := u.listed(s.stream, s.last, t0.Add(s.at))
		if started != s.started || ended != s.ended {
			t.Errorf("step %d (%s at %d, %v): started %v ended %v, want %v %v", i, s.stream, s.last, s.at, started, ended, s.started, s.ended)
		}
		if got := u.now(); (s.now == "") != (got == "") || !strings.Contains(got, s.now) {
			t.Errorf("step %d: now %q, want it to hold %q", i, got, s.now)
		}
	}
}
