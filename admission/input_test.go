package admission

import (
	"net/url"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deniable is a rig whose server refuses the service's user the API subjects deny is given
// (nil: none), changed on the live server (a configuration reload: FIELD-NOTES, "Injecting lost
// acknowledgements").
func deniable(t *testing.T) (r *rig, deny func(subjects ...string)) {
	t.Helper()
	users := func(denied []string) func(*server.Options) {
		return func(o *server.Options) {
			var perms *server.Permissions
			if len(denied) > 0 {
				perms = &server.Permissions{Publish: &server.SubjectPermission{Deny: denied}}
			}
			o.Users = []*server.User{{Username: "svc", Password: "svc-pw", Permissions: perms}}
		}
	}
	srv := testenv.StartNATSWith(t, users(nil))
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("svc", "svc-pw")
	nc, err := nats.Connect(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deny = func(subjects ...string) {
		t.Helper()
		if err := srv.Reload(users(subjects)); err != nil {
			t.Fatalf("reload the server's permissions: %v", err)
		}
	}
	return &rig{t: t, js: js, nc: nc, limiter: bucket.NewMemory(bucket.Options{}, nil)}, deny
}

// TestAFeedThatCouldNotStartIsStartedAgain: a partition taken while its feed's consumer cannot
// be made (the server refuses it: a leader elected meanwhile, a permission) has its feed started
// once the server makes it. Before, a feed that failed to start was not started again during the
// tenure: its tenants were read by subject, listed every second.
func TestAFeedThatCouldNotStartIsStartedAgain(t *testing.T) {
	r, deny := deniable(t)
	deny("$JS.API.CONSUMER.CREATE.JOBS.>")
	r.run("plans: {p: {limits: [{capacity: 10, rate: 10/s}]}}\ndefault_plan: p\n", Config{})
	waitFor(t, 10*time.Second, "the partition taken", func() bool { return r.svc.owners.ours(0) })
	waitFor(t, 10*time.Second, "a start of its feed refused", func() bool {
		r.svc.queues.mu.Lock()
		pt := r.svc.queues.parts[0]
		r.svc.queues.mu.Unlock()
		if pt == nil {
			return false
		}
		pt.health.mu.Lock()
		defer pt.health.mu.Unlock()
		return pt.health.err != nil
	})
	deny()
	waitFor(t, 20*time.Second, "the feed started", func() bool { return r.svc.queues.feedOn(0) })
	r.publish(1, "jobs.submit.acme.email")
	r.forwarded(1)
}

// TestFeedHealth is what a feed's deliveries and the listings say of it, as a table: a feed that
// delivers nothing between two listings that found jobs it had not delivered lags (its tenants
// are read by subject), broken after feedGrace (not ready), stalled after feedRestart (started
// again); a delivery, or nothing left to deliver, ends it. Before, a feed that stopped was taken
// for lagging only once broken, up to 2 × feedGrace after its last delivery: its tenants waited
// that long (the output-leader loss, its feed's consumer made again for 9 s).
func TestFeedHealth(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type event struct {
		at        time.Duration
		delivered bool
		last      uint64 // listed: the stream's last sequence (the feed's next is 10)
	}
	for _, c := range []struct {
		name                     string
		events                   []event
		now                      time.Duration
		lagging, broken, stalled bool
	}{
		{name: "caught up", events: []event{{at: 0, last: 9}, {at: time.Second, last: 9}}, now: time.Second},
		{name: "jobs found once: not yet lagging", events: []event{{at: 0, last: 12}}, now: 0},
		{name: "jobs at two listings, nothing delivered between: lagging",
			events: []event{{at: 0, last: 12}, {at: time.Second, last: 12}}, now: time.Second, lagging: true},
		{name: "a delivery between the listings: not lagging",
			events: []event{{at: 0, last: 12}, {at: 500 * time.Millisecond, delivered: true}, {at: time.Second, last: 13}}, now: time.Second},
		{name: "lagging for feedGrace: broken",
			events: []event{{at: 0, last: 12}, {at: feedGrace, last: 12}}, now: feedGrace, lagging: true, broken: true},
		{name: "lagging for feedRestart: stalled",
			events: []event{{at: 0, last: 12}, {at: feedRestart, last: 12}}, now: feedRestart, lagging: true, broken: true, stalled: true},
		{name: "a delivery ends it",
			events: []event{{at: 0, last: 12}, {at: feedGrace, last: 12}, {at: feedGrace + time.Millisecond, delivered: true}}, now: feedGrace + time.Second},
		{name: "nothing left to deliver ends it",
			events: []event{{at: 0, last: 12}, {at: feedGrace, last: 12}, {at: feedGrace + time.Second, last: 9}}, now: feedGrace + time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f feedHealth
			f.delivered(at(-time.Minute))
			for _, e := range c.events {
				if e.delivered {
					f.delivered(at(e.at))
				} else {
					f.listed(at(e.at), e.last, 10)
				}
			}
			now := at(c.now)
			lagging, broken := f.lagging(now), f.broken(now, "JOBS") != nil
			stalled := f.stalled(now)
			if lagging != c.lagging || broken != c.broken || stalled != c.stalled {
				t.Fatalf("lagging %v, broken %v, stalled %v; want %v, %v, %v", lagging, broken, stalled, c.lagging, c.broken, c.stalled)
			}
		})
	}
}
