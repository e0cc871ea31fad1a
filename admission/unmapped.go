package admission

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// unmapped tells when jobs are stored in an older input stream while this deployment spreads
// the input over its partitions (see oldStreams): in the configured stream itself, a NATS
// server lacks the partitions' mapping (Layout.In); in a stream of another count, a server
// maps with that count. Such jobs are forwarded all the same, after a detour, so nothing else
// would say that a server is misconfigured. An episode starts with the first job stored in one
// of these streams after this replica set up (jobs left there from before are not counted) and
// ends when none has been stored for unmappedQuiet; the start is logged once, as a warning
// naming the mapping line to add, the end once, and /readyz carries the detail meanwhile
// (Service.Detail). Safe for concurrent use; the zero value is ready.
type unmapped struct {
	mu      sync.Mutex
	streams map[string]*unmappedStream
}

// unmappedStream is one older stream as the listings found it.
type unmappedStream struct {
	last  uint64    // its last sequence at the latest listing (or at set-up)
	jobs  uint64    // jobs stored since the episode began (0: no episode)
	since time.Time // when a listing first found them
	newer time.Time // when a listing last found more
}

// unmappedQuiet is how long no job may be stored in an older stream before its episode ends.
const unmappedQuiet = time.Minute

// from records stream's last sequence before anything of this replica's time was stored: the
// jobs up to it are left from before (an earlier count, or before set-up), not an episode.
func (u *unmapped) from(stream string, last uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.streams == nil {
		u.streams = map[string]*unmappedStream{}
	}
	if u.streams[stream] == nil {
		u.streams[stream] = &unmappedStream{last: last}
	}
}

// listed records a listing of stream at now, which found last as its last sequence, and says
// whether an episode started or ended with it (at most one of them).
func (u *unmapped) listed(stream string, last uint64, now time.Time) (started, ended bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.streams[stream]
	if st == nil { // first seen now: what it holds was stored before
		if u.streams == nil {
			u.streams = map[string]*unmappedStream{}
		}
		u.streams[stream] = &unmappedStream{last: last}
		return false, false
	}
	switch {
	case last > st.last:
		started = st.jobs == 0
		if started {
			st.since = now
		}
		st.jobs += last - st.last
		st.newer = now
	case st.jobs > 0 && now.Sub(st.newer) >= unmappedQuiet:
		st.jobs, ended = 0, true
	}
	st.last = max(st.last, last)
	return started, ended
}

// episode describes stream's episode ("" when none is under way).
func (u *unmapped) episode(stream string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.episodeLocked(stream)
}

func (u *unmapped) episodeLocked(stream string) string {
	st := u.streams[stream]
	if st == nil || st.jobs == 0 {
		return ""
	}
	return fmt.Sprintf("%d jobs stored in stream %s since %s, the latest at %s", st.jobs, stream,
		st.since.UTC().Format(time.RFC3339), st.newer.UTC().Format(time.RFC3339))
}

// now describes every episode under way, streams sorted ("" when none is).
func (u *unmapped) now() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(u.streams)) {
		if e := u.episodeLocked(name); e != "" {
			out = append(out, e)
		}
	}
	return strings.Join(out, "; ")
}

// unmappedListed records a listing of the older stream o (last: its last sequence) and logs an
// episode's start and end.
func (s *Service) unmappedListed(o oldStream, last uint64, now time.Time) {
	started, ended := s.unmapped.listed(o.name, last, now)
	why := fmt.Sprintf("stream %s is the input of %d partitions", o.name, o.ps.N)
	if o.ps.One() {
		why = "stream " + o.name + " takes what is published without the partitions' mapping"
	}
	switch {
	case started:
		s.log.Warn("jobs are published to a NATS server without this deployment's mapping of the input over "+
			fmt.Sprint(s.in.n())+" partitions ("+why+"): they are forwarded, after a detour; add the mapping to every server's configuration and reload it (nats-server --signal reload)",
			"stream", o.name, "episode", s.unmapped.episode(o.name), "mapping", s.in.ps.MappingLine())
	case ended:
		s.log.Info("no job stored in the older stream for "+unmappedQuiet.String()+": the servers map the input", "stream", o.name)
	}
}

// Detail says, for /readyz, what the service does that is not as configured ("" when nothing):
// jobs published without the deployment's mapping of the input (see unmapped).
func (s *Service) Detail() string {
	if e := s.unmapped.now(); e != "" {
		return "jobs published without the partitions' mapping (" + s.in.ps.MappingLine() + "): " + e
	}
	return ""
}
