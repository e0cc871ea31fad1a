package admission

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"
)

// This file holds the rules of the partitions' leases (docs/design.md section 4): a tenure's
// states and transitions, which partitions a replica claims or gives up, and when another
// replica's key may be taken over. Everything here is pure: time is passed in, and the key-value
// I/O that the results ask for is owners.go's.
//
// A tenure is this replica's hold on one partition, from its claim to its end:
//
//	claiming ──applied──► held ──applied (renewed)──► held
//	   │  └──refused──► (none)      │ └──now ≥ until (renewals unanswered)──► unsure
//	   └──unanswered──► unsure      ├──refused (another's revision)──► lost
//	                                └──given up──► releasing ──its part stopped──► key deleted
//	unsure ──applied (the key still names this replica: renewed on its revision)──► held
//	unsure ──refused (another's, or none)──► lost
//
// Only a held tenure acts on its partition, until the send time of its last applied write plus
// lease − heartbeat/2; until then a held or releasing one is leased: what its part decided may
// still be published (a step whose lease ran out while it decided publishes nothing: the next
// holder finds those jobs admitted and forwards them once). Its part (input.go) starts when it is first held and stops when it is lost
// or given up; an unsure tenure keeps its part, paused: a renewal applied on its revision proves
// that nobody wrote the key meanwhile, so nobody else held the partition, and it goes on where it
// was (before, a bucket without a leader for 3 s dropped the partition and read it again from its
// first job once taken back: TestALeaseThatLapsedUnansweredResumes).

// tenureState is where a tenure stands (see above).
type tenureState uint8

const (
	claiming tenureState = iota + 1
	held
	unsure
	releasing
	lost
)

func (s tenureState) String() string {
	switch s {
	case claiming:
		return "claiming"
	case held:
		return "held"
	case unsure:
		return "unsure"
	case releasing:
		return "releasing"
	case lost:
		return "lost"
	}
	return "none"
}

// tenure is this replica's hold on one partition. The zero tenure is none.
type tenure struct {
	state tenureState
	// id tells this tenure from a later one of the same partition (an end reported for an
	// earlier tenure ends nothing).
	id uint64
	// rev is the key's revision this replica last wrote (0: none yet).
	rev uint64
	// until is when a held tenure stops acting, unless renewed: the send time of its last
	// applied write plus its validity (lease − heartbeat/2).
	until time.Time
	// since is when it became unsure (zero otherwise), and why: what the replica waits for.
	since time.Time
	why   string
	// runs: its part was started (and is not stopped yet).
	runs bool
}

// outcome is what a write of a tenure's key came to.
type outcome uint8

const (
	applied    outcome = iota + 1 // the key names this replica at the revision written
	refused                       // the key is another replica's, or gone
	unanswered                    // no answer: it may have been applied (the key this replica's at a revision it did not learn)
)

// effect is what a transition asks of the partition's part, or of its key.
type effect uint8

const (
	noEffect  effect = iota
	startPart        // its part starts: this replica reads the partition
	stopPart         // its part stops (given up: its key is deleted once it has stopped)
	deleteKey        // given up with no part running: its key is deleted now
)

// claimed is the tenure of a claim sent, as id.
func claimed(id uint64) tenure { return tenure{state: claiming, id: id} }

// wrote is t after a write of its key (a claim, a renewal, or a renewal on the revision an unsure
// tenure found) that came to o: at rev, sent at sent, valid for valid; why says what went wrong.
func (t tenure) wrote(o outcome, rev uint64, sent time.Time, valid time.Duration, why string) (tenure, effect) {
	switch o {
	case applied:
		if t.state == releasing {
			// Renewed while its part stops: what it decided may still go (leased), and the key is
			// deleted at this revision.
			t.rev, t.until = rev, sent.Add(valid)
			return t, noEffect
		}
		eff := noEffect
		if !t.runs {
			eff, t.runs = startPart, true
		}
		t.state, t.rev, t.until, t.since, t.why = held, rev, sent.Add(valid), time.Time{}, ""
		return t, eff
	case refused:
		return t.end(why)
	}
	t.why = why
	if t.state == claiming { // the claim may have been applied: asked about at the next heartbeat
		t.state, t.since = unsure, sent
	}
	return t, noEffect
}

// end is t lost: another replica holds the partition (or nobody does: its key is gone).
func (t tenure) end(why string) (tenure, effect) {
	runs := t.runs
	t.state, t.runs, t.why = lost, false, why
	if runs {
		return t, stopPart
	}
	return t, noEffect
}

// at is t at now: a held tenure whose validity has passed without a renewal applied is unsure
// (it stops acting; its part stays, paused).
func (t tenure) at(now time.Time) tenure {
	if t.state == held && !now.Before(t.until) {
		t.state, t.since = unsure, t.until
		if t.why == "" {
			t.why = "no renewal answered"
		}
	}
	return t
}

// giveUp is t given up: its part stops, then its key is deleted (at once if no part runs).
func (t tenure) giveUp() (tenure, effect) {
	runs := t.runs
	t.state, t.runs = releasing, false
	if runs {
		return t, stopPart
	}
	return t, deleteKey
}

// acts reports whether this replica may act on the partition at now.
func (t tenure) acts(now time.Time) bool { return t.state == held && now.Before(t.until) }

// leased reports whether t's lease runs at now, held or being given up: what its part decided
// may still go. An unsure tenure's has run out (its renewals went unanswered past its validity).
func (t tenure) leased(now time.Time) bool {
	return (t.state == held || t.state == releasing) && now.Before(t.until)
}

// pursued reports whether the tenure counts toward this replica's share (claimed, held or
// unsure: not being given up or lost).
func (t tenure) pursued() bool { return t.state == claiming || t.state == held || t.state == unsure }

// seenKey is a partition's key as the watch delivered it: its owner ("" when deleted), its
// revision, and when this replica first saw that revision (its monotonic clock).
type seenKey struct {
	owner string
	rev   uint64
	since time.Time
}

// claim is a partition this replica asks for: its key created (rev 0), or updated at rev, the
// revision it has seen unchanged for a whole lease.
type claim struct {
	p   int
	rev uint64
}

// takeable says whether a partition whose key is k (known: seen at all) may be claimed at now,
// and how: a key never seen or deleted is created; a key whose revision this replica has seen
// unchanged for a whole lease (its holder stopped renewing: dead, paused or cut off) is updated
// at that revision, which fails if its holder renewed meanwhile.
func takeable(p int, k seenKey, known bool, now time.Time, lease time.Duration) (claim, bool) {
	switch {
	case !known || k.owner == "":
		return claim{p: p}, true
	case now.Sub(k.since) >= lease:
		return claim{p: p, rev: k.rev}, true
	}
	return claim{}, false
}

// view is what a replica knows of the partitions at a heartbeat.
type view struct {
	self  string
	n     int
	lease time.Duration
	live  []string       // the live replicas, this one included, sorted
	count map[string]int // the live replicas' counts of partitions, as their heartbeats said
	keys  map[int]seenKey
	mine  map[int]tenure
}

// moves is what a replica does at a heartbeat: the partitions it claims and those it gives up;
// other is a live replica running another count of partitions ("" when none): nothing moves
// while it runs (both would read the older streams' tenants).
type moves struct {
	claims []claim
	giveUp []int
	other  string
}

// balance is what this replica does at now with the partitions as v sees them: each replica
// holds at most ceil(n / live); one holding more gives up those it ranks lowest, one holding
// fewer claims the takeable ones it ranks highest first (score), so that a joining replica moves
// only its share.
func balance(v view, now time.Time) moves {
	for _, id := range v.live {
		if n, ok := v.count[id]; ok && id != v.self && n != v.n {
			return moves{other: id}
		}
	}
	share := int(math.Ceil(float64(v.n) / float64(len(v.live))))
	var holding, free []int
	for p := range v.n {
		switch t, ok := v.mine[p]; {
		case ok && t.pursued():
			holding = append(holding, p)
		case !ok:
			free = append(free, p)
		}
	}
	byScore := func(ps []int) {
		slices.SortFunc(ps, func(a, b int) int { return cmp.Compare(score(v.self, b), score(v.self, a)) })
	}
	var m moves
	if len(holding) > share {
		byScore(holding)
		m.giveUp = holding[share:]
		return m
	}
	byScore(free)
	for _, p := range free {
		if len(holding)+len(m.claims) >= share {
			break
		}
		k, known := v.keys[p]
		if c, ok := takeable(p, k, known, now, v.lease); ok {
			m.claims = append(m.claims, c)
		}
	}
	return m
}

// score ranks partition p for replica id (rendezvous hashing): each replica takes free
// partitions in the order of its scores, so replicas prefer different ones.
func score(id string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(p)))
	return mix(h.Sum64())
}

// mix spreads the bits of an FNV-1a hash (splitmix64's finalizer): FNV-1a of names that differ
// in their last bytes ("t01", "t02") differs little in its high bits, and rendezvous hashing
// compares whole values.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
