package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// deadPlans has no default_plan, so a tenant it does not list is unknown. Plan small admits at
// most weight 3, and refills so slowly that a tenant's second job after a weight-3 one waits.
const deadPlans = `
plans:
  small:
    limits:
      - {name: burst, capacity: 3, rate: 1/h}
tenants:
  acme: small
  lc: small
  orig: small
  spaced: small
`

// deadCase is one job that must be dead-lettered.
type deadCase struct {
	name     string
	tenant   string
	hdr      nats.Header // the producer's own headers, besides those every case carries
	raw      bool        // publish through the raw protocol, so header values keep their spaces
	code     string
	mentions []string // the Admit-Error-Detail must contain each
}

func (c deadCase) subject() string { return "jobs.submit." + c.tenant + ".dl." + c.name + ".x" }
func (c deadCase) deadSubject() string {
	return "jobs.dead." + c.tenant + ".dl." + c.name + ".x"
}

// payload is binary and unlike any other case's, to check it is kept byte for byte.
func (c deadCase) payload() string { return "payload\x00\xff\r\n{" + c.name + "}" }

// header is everything the producer sends: the case's headers plus a multi-valued one, a
// lower-case one and a trace id.
func (c deadCase) header() nats.Header {
	h := nats.Header{"X-Trace": {c.name}, "X-Multi": {"one", "two"}, "x-lower": {"kept"}}
	for k, v := range c.hdr {
		h[k] = append(h[k], v...)
	}
	return h
}

// TestDeadLetters publishes one job per way of being rejected (every code but invalid-tenant,
// which needs a default plan: see TestDeadLetterInvalidTenant) to one admitter, and checks each
// lands exactly once on DEAD with its payload, its headers and the reason, and nowhere else.
// Then, in the same world, that a lower-case admit-weight header is honoured and a producer's
// Nats-Msg-Id is kept as Admit-Original-Msg-Id.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	w := newWorld(t, deadPlans)
	metrics := freeAddr(t)
	w.start("ADMITTER_HTTP_ADDR=" + metrics)

	weight := func(v ...string) nats.Header { return nats.Header{"Admit-Weight": v} }
	cases := []deadCase{
		{name: "letters", tenant: "acme", hdr: weight("abc"), code: "invalid-weight", mentions: []string{`"abc"`}},
		{name: "zero", tenant: "acme", hdr: weight("0"), code: "invalid-weight", mentions: []string{`"0"`}},
		{name: "negative", tenant: "acme", hdr: weight("-1"), code: "invalid-weight", mentions: []string{`"-1"`}},
		{name: "fraction", tenant: "acme", hdr: weight("1.5"), code: "invalid-weight", mentions: []string{`"1.5"`}},
		{name: "empty", tenant: "acme", hdr: weight(""), code: "invalid-weight", mentions: []string{`""`}},
		{name: "toolong", tenant: "acme", hdr: weight("99999999999999"), code: "invalid-weight", mentions: []string{`"99999999999999"`}},
		{name: "twovalues", tenant: "acme", hdr: weight("1", "2"), code: "invalid-weight", mentions: []string{`"1"`, `"2"`}},
		{name: "twokeys", tenant: "acme", hdr: nats.Header{"Admit-Weight": {"1"}, "admit-weight": {"2"}}, code: "invalid-weight", mentions: []string{`"1"`, `"2"`}},
		// nats.go trims header values when it publishes, and the leading blanks of a value when it
		// reads one, so only a raw client can make the admitter see a value with a trailing space.
		{name: "trailingspace", tenant: "acme", hdr: weight("2 "), raw: true, code: "invalid-weight", mentions: []string{`"2 "`}},
		{name: "overcapacity", tenant: "acme", hdr: weight("4"), code: "weight-over-capacity", mentions: []string{"weight 4", "3", "small"}},
		{name: "overcapacityhuge", tenant: "acme", hdr: weight("1099511627776"), code: "weight-over-capacity", mentions: []string{"weight 1099511627776"}},
		{name: "unknown", tenant: "ghost", code: "unknown-tenant", mentions: []string{`"ghost"`}},
		{name: "unknownmsgid", tenant: "ghost", hdr: nats.Header{nats.MsgIdHdr: {"producer-ghost-1"}}, code: "unknown-tenant", mentions: []string{`"ghost"`}},
		{name: "invalidmsgid", tenant: "acme", hdr: nats.Header{nats.MsgIdHdr: {"producer-acme-1"}, "Admit-Weight": {"x"}}, code: "invalid-weight", mentions: []string{`"x"`}},
		{name: "maxwait", tenant: "acme", hdr: nats.Header{"Admit-Max-Wait": {"soon"}}, code: "invalid-max-wait", mentions: []string{"Admit-Max-Wait", `"soon"`}},
		{name: "maxwaitzero", tenant: "acme", hdr: nats.Header{"admit-max-wait": {"0s"}}, code: "invalid-max-wait", mentions: []string{`"0s"`, "not positive"}},
		{name: "priority", tenant: "acme", hdr: nats.Header{"Admit-Priority": {"urgent"}}, code: "invalid-priority", mentions: []string{"Admit-Priority", `"urgent"`, "want one of 1, 2, 3, 4, 5"}},
		{name: "priorityzero", tenant: "acme", hdr: nats.Header{"admit-priority": {"0"}}, code: "invalid-priority", mentions: []string{`"0"`}},
	}
	seqs := publishDeadCases(t, w, cases)

	// Two jobs that are forwarded: a producer's Nats-Msg-Id, and a weight written " 2", which
	// nats.go sends as "2".
	origSeq := deadPublish(t, w, "jobs.submit.orig.email.send", "orig-payload", nats.Header{nats.MsgIdHdr: {"producer-orig-1"}, "X-Trace": {"orig"}})
	spacedSeq := deadPublish(t, w, "jobs.submit.spaced.email.send", "spaced-payload", nats.Header{"Admit-Weight": {" 2"}})

	checkDeadLetters(t, w, cases, seqs)
	admitted := w.read("ADMITTED", 2, 20*time.Second)
	if len(admitted) != 2 {
		t.Fatalf("ADMITTED holds %d jobs, want the 2 valid ones: %v", len(admitted), admitted)
	}
	// Dead-lettered inputs are removed as forwarded ones are.
	waitFor(t, 10*time.Second, "the input stream JOBS to be empty after the dead letters", func() bool {
		return w.streamMsgs("JOBS") == 0
	})
	if origSeq == 0 || spacedSeq == 0 {
		t.Errorf("the valid jobs' sequences %d, %d", origSeq, spacedSeq)
	}

	t.Run("OriginalMsgID", func(t *testing.T) {
		j := findJob(t, admitted, "orig-payload")
		if j.subject != "jobs.admitted.orig.email.send" {
			t.Errorf("forwarded to %s, want jobs.admitted.orig.email.send", j.subject)
		}
		if got := j.header.Values("Admit-Original-Msg-Id"); !slices.Equal(got, []string{"producer-orig-1"}) {
			t.Errorf("Admit-Original-Msg-Id = %q, want [producer-orig-1]; headers %v", got, j.header)
		}
		if id := j.header.Get(nats.MsgIdHdr); id == "" || id == "producer-orig-1" {
			t.Errorf("forwarded Nats-Msg-Id = %q, want the admitter's own", id)
		}
		if j.header.Get("X-Trace") != "orig" {
			t.Errorf("X-Trace lost: %v", j.header)
		}
	})

	t.Run("WeightWithLeadingSpace", func(t *testing.T) {
		j := findJob(t, admitted, "spaced-payload")
		if got := j.header.Values("Admit-Weight"); !slices.Equal(got, []string{"2"}) {
			t.Errorf("Admit-Weight on the forwarded job = %q, want [2] (nats.go trims the value)", got)
		}
	})

	t.Run("LowerCaseWeightHeader", func(t *testing.T) {
		// Capacity 3, refilling 1/h: after a job of weight 3, a job of weight 1 must wait. Were the
		// lower-case header ignored, the first job would weigh 1 and the second would pass.
		deadPublish(t, w, "jobs.submit.lc.report", "lc-heavy", nats.Header{"admit-weight": {"3"}})
		got := w.read("ADMITTED", 3, 20*time.Second)
		heavy := findJob(t, got, "lc-heavy")
		if v := heavy.header.Values("admit-weight"); !slices.Equal(v, []string{"3"}) {
			t.Errorf("forwarded job's admit-weight = %q, want [3] under the producer's spelling; headers %v", v, heavy.header)
		}
		deadPublish(t, w, "jobs.submit.lc.report", "lc-light", nil)
		forwarded := func() bool {
			for _, j := range w.readAll("ADMITTED") {
				if j.payload == "lc-light" {
					return true
				}
			}
			return false
		}
		// Decided and told to wait: counted delayed, under plan lc's.
		waitFor(t, 20*time.Second, "the weight-1 job after the weight-3 one to be decided", func() bool {
			_, body := httpGet(t, "http://"+metrics+"/metrics")
			return metricValue(body, "admitter_decisions_total", `outcome="delayed"`) >= 1 || forwarded()
		})
		if forwarded() {
			t.Fatalf("the weight-1 job was forwarded at once: the lower-case admit-weight: 3 was not honoured")
		}
		// The forwarded one is removed by the next compaction (a heartbeat); the delayed one
		// waits where it arrived.
		waitFor(t, 5*time.Second, "JOBS to hold the delayed job alone: it waits where it arrived", func() bool { return w.streamMsgs("JOBS") == 1 })
	})
}

// TestDeadLetterInvalidTenant checks tenants that cannot be used as limiter keys are
// dead-lettered. It needs a default plan, else they would be unknown tenants first.
func TestDeadLetterInvalidTenant(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
plans:
  free:
    limits:
      - {capacity: 5, rate: 1/s}
default_plan: free
`)
	w.start()
	cases := []deadCase{
		{name: "open", tenant: "a{b", code: "invalid-tenant", mentions: []string{`"a{b"`}},
		{name: "close", tenant: "c}d", code: "invalid-tenant", mentions: []string{`"c}d"`}},
		{name: "both", tenant: "{x}", hdr: nats.Header{"Admit-Weight": {"2"}, nats.MsgIdHdr: {"producer-x-1"}}, code: "invalid-tenant", mentions: []string{`"{x}"`}},
	}
	seqs := publishDeadCases(t, w, cases)
	checkDeadLetters(t, w, cases, seqs)
	waitFor(t, 10*time.Second, "the input stream JOBS to be empty after the dead letters", func() bool {
		return w.streamMsgs("JOBS") == 0
	})
	if n := len(w.readAll("ADMITTED")); n != 0 {
		t.Errorf("ADMITTED holds %d jobs, want none", n)
	}
}

// TestHeaderProducerExpectationsDoNotStrandJobs: a producer may publish to the input stream with
// JetStream's optimistic-concurrency headers (jetstream.WithExpectLastSequence,
// WithExpectLastMsgID). They are checked against JOBS when the job is stored; they say nothing
// about ADMITTED or DEAD. A job stored with them must still be forwarded, or dead-lettered.
func TestHeaderProducerExpectationsDoNotStrandJobs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
plans:
  free:
    limits:
      - {capacity: 5, rate: 1/s}
default_plan: free
`)
	w.start()
	// JOBS seq 1, dead-lettered: DEAD now holds 1 message, ADMITTED none.
	deadPublish(t, w, "jobs.submit.acme.first", "first", nats.Header{"Admit-Weight": {"bad"}, nats.MsgIdHdr: {"m-first"}})
	w.read("DEAD", 1, 10*time.Second)
	// JOBS seq 2, valid, stored because JOBS's last sequence is 1.
	fwd := deadPublish(t, w, "jobs.submit.acme.second", "second", nats.Header{"Nats-Expected-Last-Sequence": {"1"}, nats.MsgIdHdr: {"m-second"}})
	// JOBS seq 3, invalid weight, stored because JOBS's last message id is m-second.
	dl := deadPublish(t, w, "jobs.submit.acme.third", "third", nats.Header{"Nats-Expected-Last-Msg-Id": {"m-second"}, "Admit-Weight": {"bad"}})

	has := func(stream, payload string) bool {
		for _, j := range w.readAll(stream) {
			if j.payload == payload {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !(has("ADMITTED", "second") && has("DEAD", "third")) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !has("ADMITTED", "second") {
		t.Errorf("a valid job published with Nats-Expected-Last-Sequence: 1 (true of JOBS, sequence %d) was not forwarded within 10s: "+
			"the forward carries the producer's header and ADMITTED rejects it (wrong last sequence)", fwd)
	}
	if !has("DEAD", "third") {
		t.Errorf("an invalid job published with Nats-Expected-Last-Msg-Id (true of JOBS, sequence %d) was not dead-lettered within 10s: "+
			"the dead letter carries the producer's header and DEAD rejects it", dl)
	}
}

// publishDeadCases publishes every case and returns the stream sequences of the inputs.
func publishDeadCases(t *testing.T, w *world, cases []deadCase) []uint64 {
	t.Helper()
	seqs := make([]uint64, len(cases))
	for i, c := range cases {
		if c.raw {
			seqs[i] = deadRawPublish(t, w, c.subject(), c.payload(), c.header())
		} else {
			seqs[i] = deadPublish(t, w, c.subject(), c.payload(), c.header())
		}
	}
	return seqs
}

// checkDeadLetters waits until every case is dead-lettered, then checks DEAD holds exactly one
// dead letter per case and ADMITTED none.
func checkDeadLetters(t *testing.T, w *world, cases []deadCase, seqs []uint64) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d inputs dead-lettered", len(cases)), func() bool {
		return len(w.readHeaders("DEAD")) >= len(cases)
	})
	dead := w.readAll("DEAD")
	if len(dead) != len(cases) {
		t.Errorf("DEAD holds %d messages, want %d", len(dead), len(cases))
	}
	ids := map[string]string{}
	for i, c := range cases {
		t.Run(c.code+"/"+c.name, func(t *testing.T) {
			_ = seqs[i]
			var got []job
			for _, j := range dead {
				if j.payload == c.payload() {
					got = append(got, j)
				}
			}
			if len(got) != 1 {
				t.Fatalf("%d dead letters with the payload, want 1", len(got))
			}
			d := got[0]
			if d.subject != c.deadSubject() {
				t.Errorf("dead letter on %q, want %q", d.subject, c.deadSubject())
			}
			if v := d.header.Values("Admit-Error"); !slices.Equal(v, []string{c.code}) {
				t.Errorf("Admit-Error = %q, want [%s]", v, c.code)
			}
			detail := d.header.Get("Admit-Error-Detail")
			if len(d.header.Values("Admit-Error-Detail")) != 1 || detail == "" {
				t.Errorf("Admit-Error-Detail = %q, want one non-empty sentence", d.header.Values("Admit-Error-Detail"))
			}
			for _, m := range c.mentions {
				if !strings.Contains(detail, m) {
					t.Errorf("Admit-Error-Detail %q does not mention %s", detail, m)
				}
			}
			id := d.header.Get(nats.MsgIdHdr)
			if id == "" {
				t.Errorf("dead letter has no Nats-Msg-Id: %v", d.header)
			} else if other, dup := ids[id]; dup {
				t.Errorf("Nats-Msg-Id %q is also on the dead letter of %s", id, other)
			}
			ids[id] = c.name
			for k, vs := range c.header() {
				want := make([]string, len(vs))
				for i, v := range vs {
					want[i] = strings.TrimSpace(v) // nats.go trims values when it publishes
				}
				if k == nats.MsgIdHdr {
					if id == vs[0] {
						t.Errorf("dead letter kept the producer's Nats-Msg-Id %q", id)
					}
					k = "Admit-Original-Msg-Id"
				}
				if got := d.header.Values(k); !slices.Equal(got, want) {
					t.Errorf("producer header %s = %q on the dead letter, want %q", k, got, want)
				}
			}
			for _, k := range []string{"Admit-Tenant", "Admit-Plan", "Admit-Attempts", "Admit-Delay-Ms"} {
				if v := d.header.Values(k); v != nil {
					t.Errorf("dead letter carries %s %q, a header of admitted jobs", k, v)
				}
			}
		})
	}
	for _, j := range w.readAll("ADMITTED") {
		for _, c := range cases {
			if j.payload == c.payload() {
				t.Errorf("dead-lettered job %s also reached ADMITTED on %s", c.name, j.subject)
			}
		}
	}
}

func findJob(t *testing.T, jobs []job, payload string) job {
	t.Helper()
	for _, j := range jobs {
		if j.payload == payload {
			return j
		}
	}
	t.Fatalf("no job with payload %q among %d", payload, len(jobs))
	return job{}
}

// deadPublish stores a job with the given headers on the input stream and returns its sequence.
func deadPublish(t *testing.T, w *world, subject, payload string, h nats.Header) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	for k, vs := range h {
		for _, v := range vs {
			m.Header.Add(k, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := w.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	if ack.Stream != "JOBS" || ack.Duplicate {
		t.Fatalf("publish %s: PubAck %+v, want a new message on JOBS", subject, ack)
	}
	return ack.Sequence
}

// deadRawPublish stores a job on the input stream through the raw NATS protocol, so the header
// values go on the wire exactly as given (nats.go would trim them), and returns its sequence.
func deadRawPublish(t *testing.T, w *world, subject, payload string, h nats.Header) uint64 {
	t.Helper()
	u, err := url.Parse(w.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var hdr strings.Builder
	hdr.WriteString("NATS/1.0\r\n")
	for k, vs := range h {
		for _, v := range vs {
			hdr.WriteString(k + ": " + v + "\r\n")
		}
	}
	hdr.WriteString("\r\n")
	const reply = "_RAW_REPLY.pub"
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\nSUB %s 1\r\n", reply)
	fmt.Fprintf(conn, "HPUB %s %s %d %d\r\n%s%s\r\nPING\r\n", subject, reply, hdr.Len(), hdr.Len()+len(payload), hdr.String(), payload)
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw publish %s: reading the reply: %v", subject, err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "PING":
			fmt.Fprint(conn, "PONG\r\n")
		case strings.HasPrefix(line, "-ERR"):
			t.Fatalf("raw publish %s: %s", subject, line)
		case strings.HasPrefix(line, "MSG "):
			f := strings.Fields(line)
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				t.Fatalf("raw publish %s: bad MSG line %q", subject, line)
			}
			body := make([]byte, n+2)
			if _, err := io.ReadFull(r, body); err != nil {
				t.Fatalf("raw publish %s: %v", subject, err)
			}
			var ack struct {
				Stream string `json:"stream"`
				Seq    uint64 `json:"seq"`
				Error  *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body[:n], &ack); err != nil || ack.Error != nil || ack.Stream != "JOBS" {
				t.Fatalf("raw publish %s: PubAck %s (%v)", subject, body[:n], err)
			}
			return ack.Seq
		}
	}
}

// TestDeadLetterReplayWithHeaders: an invalid-weight dead letter cannot be mended by a plain
// replay (its weight is still not a weight). `admitter dead replay --set-header
// Admit-Weight=2` replays it with the header replaced, every spelling of it, and it is
// forwarded, charged 2; the replay's record in DEAD_replays says what was set and dropped. An
// edit of the replay's own headers is refused with the header's name, and publishes nothing.
func TestDeadLetterReplayWithHeaders(t *testing.T) {
	t.Parallel()
	w := newWorld(t, deadPlans)
	httpAddr := freeAddr(t)
	w.start("ADMITTER_HTTP_ADDR=" + httpAddr)
	deadPublish(t, w, "jobs.submit.acme.mend.x", "mend-me", nats.Header{"admit-weight": {"two"}, "X-Bad": {"1"}, "X-Trace": {"m"}})
	dead := w.read("DEAD", 1, 20*time.Second)
	if len(dead) != 1 || dead[0].header.Get("Admit-Error") != "invalid-weight" {
		t.Fatalf("dead letters %v, want the invalid-weight one", dead)
	}
	waitFor(t, 10*time.Second, "the dead-lettered input to be removed from JOBS", func() bool { return w.streamMsgs("JOBS") == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := w.js.Stream(ctx, "DEAD")
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, "jobs.dead.acme.mend.x")
	if err != nil {
		t.Fatal(err)
	}
	seq := strconv.FormatUint(last.Sequence, 10)
	run := func(args ...string) (int, string) {
		out, err := w.command(append([]string{"dead", "replay", "--seq", seq}, args...)...).CombinedOutput()
		return demoExitCode(t, err), string(out)
	}

	for _, c := range []struct{ args []string }{
		{[]string{"--set-header", "Nats-Msg-Id=mine"}},
		{[]string{"--drop-header", "Admit-Replay-Of"}},
		{[]string{"--set-header", "Admit-Weight"}},
	} {
		code, out := run(c.args...)
		if code != 2 || !strings.Contains(out, "admitter dead: "+c.args[0]+" "+strconv.Quote(c.args[1])+": deadletter: header edit refused: ") {
			t.Errorf("dead replay %v: exit %d, %s; want 2 and an error naming the flag and the header", c.args, code, out)
		}
	}
	if n := w.streamMsgs("JOBS") + uint64(len(w.readAll("ADMITTED"))); n != 0 {
		t.Fatalf("refused edits published %d jobs", n)
	}

	code, out := run("--set-header", "Admit-Weight=2", "--drop-header", "x-bad", "--drop-header", "X-Absent")
	if code != 0 || !strings.Contains(out, "replayed") || !strings.Contains(out, "set Admit-Weight=2; drop x-bad") {
		t.Fatalf("dead replay --set-header Admit-Weight=2: exit %d:\n%s", code, out)
	}
	got := w.read("ADMITTED", 1, 20*time.Second)
	j := findJob(t, got, "mend-me")
	if j.header.Get("Admit-Replay-Of") != "DEAD:"+seq || !slices.Equal(j.header.Values("Admit-Weight"), []string{"2"}) ||
		j.header.Get("admit-weight") != "" || j.header.Get("X-Bad") != "" || j.header.Get("X-Trace") != "m" || j.header.Get("Admit-Error") != "" {
		t.Errorf("the mended job as forwarded: %v", j.header)
	}
	// Charged 2 of the plan's 3: a job of weight 2 now waits (1/h refill).
	deadPublish(t, w, "jobs.submit.acme.after.x", "after", nats.Header{"Admit-Weight": {"2"}})
	waitFor(t, 10*time.Second, "the weight-2 job after the mended one to wait in JOBS", func() bool { return w.streamMsgs("JOBS") == 1 })
	if n := len(w.readAll("ADMITTED")); n != 1 {
		t.Errorf("ADMITTED holds %d jobs, want the mended one alone (it took 2 of 3)", n)
	}

	kv, err := w.js.KeyValue(ctx, "DEAD_replays")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		By   string `json:"by"`
		Edit struct {
			Set  map[string]string `json:"set"`
			Drop []string          `json:"drop"`
		} `json:"edit"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil || !strings.HasPrefix(rec.By, "cli: ") ||
		fmt.Sprint(rec.Edit.Set) != "map[Admit-Weight:2]" || !slices.Equal(rec.Edit.Drop, []string{"x-bad"}) {
		t.Errorf("the replay's record %s (%v), want by cli, set Admit-Weight=2 and drop x-bad", e.Value(), err)
	}
	// The console's page of the dead letter shows the record with the edit.
	if code, page := httpGet(t, "http://"+httpAddr+"/console/dead/"+seq); code != 200 || !strings.Contains(page, "headers changed: set Admit-Weight=2; drop x-bad") {
		t.Errorf("the console's dead letter page: %d, want the replay's headers changed:\n%s", code, page)
	}
	// Replayed once: asked again, with or without an edit, nothing more is published.
	if code, out := run("--set-header", "Admit-Weight=1"); code != 0 || !strings.Contains(out, "already-replayed") {
		t.Errorf("a second replay: exit %d:\n%s", code, out)
	}
	if n := len(w.readAll("ADMITTED")); n != 1 {
		t.Errorf("ADMITTED holds %d jobs after a second replay, want 1", n)
	}
}
