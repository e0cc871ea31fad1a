package admission

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxParked caps the jobs parked at once when MaxAckPending does not (it is unlimited); past it
// delayed jobs are NAK'd with their wait.
const maxParked = 100_000

// parking keeps delayed jobs in this process until their slot, instead of NAKing them for
// JetStream to redeliver.
//
// Why: nats-server (v2.15.2, consumer.go processNak) re-arms the consumer's redelivery timer
// 10ms ahead on every NakWithDelay, so while NAKs arrive less than 10ms apart no delayed message
// is redelivered at all, for any tenant (measured: 17s without an admission under a 10x
// overload). Parked, a job is delivered once, JetStream sees no NAK and no redelivery, and the
// slot is met to the millisecond.
//
// A parked job stays unacknowledged: it counts against MaxAckPending, which therefore bounds how
// many are parked, and it is kept alive with a progress ack (InProgress, which does not touch
// that timer) every half ack wait. Should the process die, JetStream redelivers it after the
// ack wait and its booked slot waits for it in the limiter. On close, every parked job goes back
// to JetStream with the rest of its wait.
type parking struct {
	max       time.Duration // longest wait parked; longer ones are NAK'd
	keepalive time.Duration // progress ack interval, half the ack wait
	due       chan jetstream.Msg
	stop      chan struct{} // closed by close: jobs coming due go back to JetStream

	mu     sync.Mutex
	closed bool
	jobs   map[*parked]struct{}
}

type parked struct {
	msg   jetstream.Msg
	at    time.Time
	timer *time.Timer
}

func newParking(max, ackWait time.Duration) *parking {
	return &parking{max: max, keepalive: ackWait / 2, due: make(chan jetstream.Msg),
		stop: make(chan struct{}), jobs: make(map[*parked]struct{})}
}

// park keeps m until wait has passed, then hands it to the workers on due, and reports whether
// it did; a job it does not take is the caller's to NAK.
func (p *parking) park(m jetstream.Msg, wait time.Duration) bool {
	if wait > p.max {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.jobs) >= maxParked {
		return false
	}
	pk := &parked{msg: m, at: time.Now().Add(wait)}
	p.jobs[pk] = struct{}{}
	p.arm(pk)
	return true
}

// arm sets pk's timer for its slot, or for its next progress ack if that comes first. Lock held.
func (p *parking) arm(pk *parked) {
	d := time.Until(pk.at)
	if d > p.keepalive {
		d = p.keepalive
	}
	pk.timer = time.AfterFunc(d, func() { p.fire(pk) })
}

func (p *parking) fire(pk *parked) {
	p.mu.Lock()
	if _, ok := p.jobs[pk]; !ok { // close took it back
		p.mu.Unlock()
		return
	}
	if time.Until(pk.at) > 0 { // not yet: keep it alive and wait on
		_ = pk.msg.InProgress()
		p.arm(pk)
		p.mu.Unlock()
		return
	}
	delete(p.jobs, pk)
	p.mu.Unlock()
	select {
	case p.due <- pk.msg:
	case <-p.stop:
		_ = pk.msg.Nak()
	}
}

// close hands every parked job back to JetStream with the rest of its wait, and makes park
// refuse. Safe to call twice.
func (p *parking) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.stop)
	for pk := range p.jobs {
		pk.timer.Stop()
		_ = pk.msg.NakWithDelay(max(time.Until(pk.at), time.Microsecond))
		delete(p.jobs, pk)
	}
}

// len is how many jobs are parked now.
func (p *parking) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.jobs)
}
