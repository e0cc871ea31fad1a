package bucket

import (
	"encoding/binary"
	"fmt"
)

// A tenant's state as Redis stores it (lua/state.lua, "The state is one string of packed
// little-endian int64s"), read in Go: the local copy (Local) starts from the state Redis wrote,
// as admit.lua returns it when asked (Batch.Mirror). Only the two layouts write_state writes are
// read; the older ones are converted by the first script that writes them.

// The layout tags of lua/state.lua (STATE_TAG, SHORT_TAG) and the id of the booked slots'
// record (BOOKED_ID).
const (
	stateTag = 1094995253 // "ADM5": a header of 10 values
	shortTag = 1094995254 // "ADM6": a header of 8 values, no recent decisions
	bookedID = -1
	holdID   = -2 // HOLD_ID: until when the downstream holds the tenant's forwards
)

// decodeState reads raw, a state written by lua/state.lua's write_state, into a memState. It
// keeps every record whatever the plan (a limit's state is matched to the plan by id and kind
// when it is loaded). An error names the value that does not parse; nothing of raw is kept.
func decodeState(raw []byte) (*memState, error) {
	n := len(raw) / 8
	if len(raw)%8 != 0 || n < 8 {
		return nil, fmt.Errorf("bucket: a state of %d bytes: want a whole number of int64s, at least 8", len(raw))
	}
	v := func(i int) int64 { return int64(binary.LittleEndian.Uint64(raw[8*i:])) }
	hdr := 0
	switch v(0) {
	case stateTag:
		hdr = 10
	case shortTag:
		hdr = 8
	default:
		return nil, fmt.Errorf("bucket: a state tagged %d: want %d or %d", v(0), stateTag, shortTag)
	}
	if n < hdr {
		return nil, fmt.Errorf("bucket: a state of %d values: its header has %d", n, hdr)
	}
	recs, m := v(1), v(6)
	st := &memState{stored: v(2), keep: v(3), owner: v(4), ownerUntil: v(5), expiry: v(7)}
	if recs < 0 || m < 0 || m > int64(n) {
		return nil, fmt.Errorf("bucket: a state with %d records and %d recent decisions", recs, m)
	}
	pos := hdr
	if pos+2*int(m) > n {
		return nil, fmt.Errorf("bucket: a state of %d values cannot hold %d recent decisions after its header", n, m)
	}
	st.marks = make([]mark, m)
	for k := range st.marks {
		st.marks[k] = mark{v(pos), v(pos + 1)}
		pos += 2
	}
	for r := int64(0); r < recs; r++ {
		if pos+2 > n {
			return nil, fmt.Errorf("bucket: a state's record %d starts past its end (%d values)", r, n)
		}
		id, desc := v(pos), v(pos+1)
		kind, size := Kind(desc%4), int(desc/4)
		pos += 2
		if desc < 0 || size > n-pos {
			return nil, fmt.Errorf("bucket: a state's record %d (id %d) claims %d values, %d are left", r, id, size, n-pos)
		}
		switch {
		case id == holdID:
			if size != 1 {
				return nil, fmt.Errorf("bucket: a state's downstream hold has %d values: want 1", size)
			}
			st.hold = v(pos)
		case id == bookedID:
			if size%2 != 0 {
				return nil, fmt.Errorf("bucket: a state's booked slots have %d values: want pairs", size)
			}
			for j := 0; j < size; j += 2 {
				st.booked = append(st.booked, entry{v(pos + j), v(pos + j + 1)})
			}
		case kind == KindBucket:
			if size < 1 || size > 2 {
				return nil, fmt.Errorf("bucket: a state's bucket record (id %d) has %d values: want 1 or 2", id, size)
			}
			l := memLimit{id: id, kind: kind, tat: v(pos)}
			if size == 2 {
				l.iv = v(pos + 1)
			}
			st.limits = append(st.limits, l)
		case kind == KindConcurrency:
			if size%4 != 0 {
				return nil, fmt.Errorf("bucket: a state's concurrency record (id %d) has %d values: want 4 per lease", id, size)
			}
			l := memLimit{id: id, kind: kind}
			for j := 0; j < size; j += 4 {
				l.log = append(l.log, entry{v(pos + j), v(pos + j + 1)})
				l.tags = append(l.tags, leaseTag{v(pos + j + 2), v(pos + j + 3)})
			}
			st.limits = append(st.limits, l)
		default:
			if size%2 != 0 {
				return nil, fmt.Errorf("bucket: a state's %s record (id %d) has %d values: want pairs", kind, id, size)
			}
			l := memLimit{id: id, kind: kind}
			for j := 0; j < size; j += 2 {
				l.log = append(l.log, entry{v(pos + j), v(pos + j + 1)})
			}
			st.limits = append(st.limits, l)
		}
		pos += size
	}
	if pos != n {
		return nil, fmt.Errorf("bucket: a state has %d values after its last record", n-pos)
	}
	return st, nil
}

// holdAt is until when the downstream holds the tenant's forwards (µs; 0 for no state).
func (st *memState) holdAt() int64 {
	if st == nil {
		return 0
	}
	return st.hold
}
