package bucket

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/redis/rueidis"
)

// commandStats reads INFO commandstats: calls per command (cmdstat_<name>).
func commandStats(t *testing.T, c rueidis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestRedisInspectReadsOnlyTheTenantsKeys: Inspect of a tenant with booked slots, beside many
// other keys (ADMITTER_TEST_INSPECT_KEYS, default 100,000), issues no SCAN and only commands on
// the tenant's own key: its cost does not grow with the keyspace (issue 15, item 6). It logs the
// commands and the time one inspect took.
func TestRedisInspectReadsOnlyTheTenantsKeys(t *testing.T) {
	keys := 100_000
	if s := os.Getenv("ADMITTER_TEST_INSPECT_KEYS"); s != "" {
		var err error
		if keys, err = strconv.Atoi(s); err != nil {
			t.Fatalf("ADMITTER_TEST_INSPECT_KEYS: %v", err)
		}
	}
	srv := testenv.StartRedis(t)
	opt, err := RedisClientOption(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	// Other tenants' keys, written by the server itself in chunks (bounded script calls).
	const fill = `for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('SET', 'admitter:{other' .. i .. '}:job', 'x') end return 1`
	for lo := 1; lo <= keys; lo += 20_000 {
		hi := min(lo+20_000-1, keys)
		if err := client.Do(ctx, client.B().Eval().Script(fill).Numkeys(0).Arg(strconv.Itoa(lo), strconv.Itoa(hi)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	r := NewRedis(client, "", Options{})
	r.born.off = true // the server just started: take the tenant's limits for unused, not forgotten
	p := mustPlan(t, "p", lim("", 2, 100*ms))
	tenant := uniqueTenant("inspect")
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if _, err := r.Decide(ctx, Request{Tenant: tenant, Plan: p, Weight: 1, JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Inspect(ctx, tenant, p); err != nil { // the script loaded, the server's start known
		t.Fatal(err)
	}
	before := commandStats(t, client)
	begin := time.Now()
	s, err := r.Inspect(ctx, tenant, p)
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	after := commandStats(t, client)
	var issued []string
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" && name != "ping" && name != "hello" { // ping: the client's keep-alive; hello: a connection it opened meanwhile
			issued = append(issued, name+"×"+strconv.FormatInt(d, 10))
		}
	}
	slices.Sort(issued)
	t.Logf("inspect beside %d keys: %v in %v; %d reservations", keys, issued, took, s.Reservations)
	if s.Reservations != 3 {
		t.Errorf("reservations = %d, want 3", s.Reservations)
	}
	// One call of the library's read-only function, and inside it the server's clock and the
	// tenant's state.
	if want := []string{"fcall_ro×1", "get×1", "time×1"}; !slices.Equal(issued, want) {
		t.Fatalf("inspect issued %v, want %v: one script call reading the tenant's keys, no SCAN", issued, want)
	}
}
