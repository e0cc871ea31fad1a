package bucket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Decisions of many tenants go to Redis together: one script call (lua/many.lua) runs admit.lua
// for each of the queue's batches, or decide.lua for each request, as it would alone, so that
// the fixed cost of a call (its dispatch, the clock, the script's setup) is paid once for all of
// them. Nothing waits to fill a call: a batch goes at once while fewer than coalesceCalls calls
// are under way, and only the batches that arrive meanwhile are sent together by the next call
// (a group commit). On Redis Cluster a call carries one batch, as a script's keys must share a
// hash slot.
const (
	coalesceCalls   = 4    // script calls under way at once
	coalesceBatches = 128  // batches in one call
	coalesceJobs    = 2048 // jobs in one call
)

// admitCall is one batch on its way: its keys, its argument (built again after a NOSCRIPT, as it
// carries when the server's memory began), the length of its reply, and its reply once decided.
type admitCall struct {
	keys     []string
	arg      func() string
	jobs     int       // the jobs it decides (1 for a request)
	size     int       // its reply's length in bytes (without the mirrored state)
	shadow   bool      // a shadow plan's batch (see BatchResult.ShadowWaits)
	mirror   bool      // its reply ends with the tenant's state (see Batch.Mirror)
	deadline time.Time // its caller's, zero when none
	// Set once done is closed.
	reply []byte
	err   error
	done  chan struct{}
}

// replyLen is the length of the batch's reply at the start of rest (what is left of every
// batch's replies): its fixed part, and for a mirror the server's time, the state's length and
// the state (see lua/admit.lua). -1 when rest is too short to hold it.
func (c *admitCall) replyLen(rest []byte) int {
	if !c.mirror {
		if len(rest) < c.size {
			return -1
		}
		return c.size
	}
	if len(rest) < c.size+16 {
		return -1
	}
	b := int64(binary.LittleEndian.Uint64(rest[c.size+8:]))
	if b < 0 || b > int64(len(rest)-c.size-16) {
		return -1
	}
	return c.size + 16 + int(b)
}

// admitReplyLen is the length of admit.lua's reply for k jobs: wait, binding limit, remaining,
// leases expired, one outcome per job, and for a shadow plan one wait per job.
func admitReplyLen(k int, shadow bool) int {
	if shadow {
		return 8 * (4 + 2*k)
	}
	return 8 * (4 + k)
}

// decideReplyLen is the length of decide.lua's reply.
const decideReplyLen = 8 * 5

// coalescer sends batches in calls of many. A batch that finds fewer than maxCalls calls under
// way starts one (a goroutine of the coalescer's, which takes what is queued, call after call,
// until the queue is empty); otherwise it waits in the queue for the next call. Every call runs
// under the latest deadline of the batches it carries: their callers may give up sooner (a call
// that times out may still run, which the redeem window makes harmless), but none is cut short
// by another's.
type coalescer struct {
	exec                          func(ctx context.Context, calls []*admitCall)
	maxCalls, maxBatches, maxJobs int

	mu      sync.Mutex
	queue   []*admitCall
	running int
}

// do decides c, alone or with others; it returns when c is decided or ctx ends.
func (q *coalescer) do(ctx context.Context, c *admitCall) error {
	c.deadline, _ = ctx.Deadline()
	q.mu.Lock()
	q.queue = append(q.queue, c)
	if q.running < q.maxCalls {
		q.running++
		go q.drain()
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain runs calls until the queue is empty.
func (q *coalescer) drain() {
	for {
		calls := q.take()
		if calls == nil {
			return
		}
		q.run(calls)
	}
}

// take removes the next call's batches from the queue; with none left it ends the drain and
// returns nil.
func (q *coalescer) take() []*admitCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, jobs := 0, 0
	for n < len(q.queue) && n < q.maxBatches && (n == 0 || jobs+q.queue[n].jobs <= q.maxJobs) {
		jobs += q.queue[n].jobs
		n++
	}
	if n == 0 {
		q.running--
		return nil
	}
	calls := make([]*admitCall, n)
	copy(calls, q.queue)
	clear(q.queue[:n])
	q.queue = q.queue[n:]
	return calls
}

// run makes one call for calls, until the latest of their deadlines (callTimeout at most).
func (q *coalescer) run(calls []*admitCall) {
	end := time.Now().Add(callTimeout)
	latest := time.Time{}
	for _, c := range calls {
		if c.deadline.IsZero() {
			latest = end
			break
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if latest.After(end) {
		latest = end
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	q.exec(ctx, calls)
	for _, c := range calls {
		close(c.done)
	}
}

// callTimeout bounds a call of the coalescer: every caller has a shorter deadline of its own.
const callTimeout = 10 * time.Second

// execAdmits is the queue's coalescer's call: admit.lua for every batch of calls.
func (r *Redis) execAdmits(ctx context.Context, calls []*admitCall) { r.execMany(ctx, r.admit, calls) }

// execDecides is the requests' coalescer's call: decide.lua for every request of calls.
func (r *Redis) execDecides(ctx context.Context, calls []*admitCall) {
	r.execMany(ctx, r.script, calls)
}

// execMany runs script (lua/many.lua over one of the scripts) with every batch of calls, and
// gives each its reply or error. The batches a server refused because it lost admitter's state
// after they were built (lua/state.lua memory_of) are sent again once, with when.
func (r *Redis) execMany(ctx context.Context, script *script, calls []*admitCall) {
	r.execManyOnce(ctx, script, calls)
	var again []*admitCall
	for _, c := range calls {
		if isStaleMemory(c.err) {
			c.err = nil
			again = append(again, c)
		}
	}
	if len(again) == 0 {
		return
	}
	r.born.stale()
	if err := r.refreshBorn(ctx); err != nil {
		for _, c := range again {
			c.err = err
		}
		return
	}
	r.execManyOnce(ctx, script, again)
}

// execManyOnce is one try of execMany.
func (r *Redis) execManyOnce(ctx context.Context, script *script, calls []*admitCall) {
	resp := r.exec(ctx, script, func() (keys, args []string) {
		head := make([]byte, 0, 8*(1+len(calls)))
		head = packInts(head, int64(len(calls)))
		args = make([]string, 1, 1+len(calls))
		for _, c := range calls {
			head = packInts(head, int64(len(c.keys)))
			keys = append(keys, c.keys...)
			args = append(args, c.arg())
		}
		args[0] = string(head)
		return keys, args
	})
	vals, err := resp.ToArray()
	if err == nil && len(vals) != 1+len(calls) {
		err = fmt.Errorf("reply of %d values for %d batches", len(vals), len(calls))
	}
	var replies []byte
	if err == nil {
		replies, err = vals[0].AsBytes()
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
			continue
		}
		why, err2 := vals[1+i].ToString()
		switch {
		case err2 != nil:
			c.err = err2
		case why != "":
			c.err = errors.New(why)
		default:
			n := c.replyLen(replies)
			if n < 0 {
				c.err = fmt.Errorf("reply of %d bytes is too short for batch %d of %d", len(replies), i+1, len(calls))
				break
			}
			c.reply, replies = replies[:n], replies[n:]
		}
	}
	if err == nil && len(replies) != 0 {
		for _, c := range calls {
			if c.err == nil {
				c.err = fmt.Errorf("reply has %d bytes left over", len(replies))
			}
		}
	}
}
