package bucket

import (
	"time"

	"github.com/admitter/admitter/lua"
)

// The slots booked by Decide and not yet claimed, as a tenant's state counts them (book and
// unbook of lua/state.lua, mirrored here function by function): a log of (death, count), death
// being the slot plus Options.SlotGrace, sorted by death, one entry per death, at most maxBooked
// entries. Inspect reads the count and the latest slot from it, never from the job keys.

// maxBooked is MAX_BOOKED of lua/state.lua: the most entries the log keeps. Past it the two
// entries whose deaths are closest are merged into the later one, whose count then lasts until
// its death: Snapshot.Reservations may then count a slot a little past its grace, never forget
// one early, and the latest slot stays exact.
const maxBooked = lua.MaxBooked

// book counts a slot booked until death.
func book(b []entry, death int64) []entry {
	j := len(b) - 1
	for j >= 0 && b[j].death > death {
		j--
	}
	if j >= 0 && b[j].death == death {
		b[j].weight++
		return b
	}
	b = append(b, entry{})
	copy(b[j+2:], b[j+1:])
	b[j+1] = entry{death, 1}
	if len(b) > maxBooked {
		best, at := int64(-1), 0
		for k := 0; k+1 < len(b); k++ {
			if gap := b[k+1].death - b[k].death; best < 0 || gap < best {
				best, at = gap, k
			}
		}
		b[at+1].weight += b[at].weight
		b = append(b[:at], b[at+1:]...)
	}
	return b
}

// unbook uncounts a booked slot claimed by its job, counted until death: from the first entry
// dying at or after death (where a merge put it). It reports whether it found one.
func unbook(b []entry, death int64) ([]entry, bool) {
	for j := range b {
		if b[j].death >= death {
			if b[j].weight > 1 {
				b[j].weight--
			} else {
				b = append(b[:j], b[j+1:]...)
			}
			return b, true
		}
	}
	return b, false
}

// liveBooked drops the entries that died by now.
func liveBooked(b []entry, now int64) []entry {
	first := 0
	for first < len(b) && b[first].death <= now {
		first++
	}
	return append(b[:0], b[first:]...)
}

// addBooked sets the snapshot's reservations from a booking log read at now: the bookings still
// counted and the latest slot (the last death less the grace).
func (s *Snapshot) addBooked(b []entry, now, grace int64) {
	for _, e := range b {
		if e.death > now {
			s.Reservations += int(e.weight)
		}
	}
	if len(b) > 0 && b[len(b)-1].death > now {
		s.LatestSlot = time.UnixMicro(b[len(b)-1].death - grace)
	}
}
