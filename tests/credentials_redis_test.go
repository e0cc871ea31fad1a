package tests

import (
	"context"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/redis/rueidis"
)

// aclUser are redis-server arguments that turn the default user off and make user admitter
// with password pw, allowed everything.
func aclUser(pw string) []string {
	return []string{"--user", "default", "off", "--user", "admitter", "on", ">" + pw, "~*", "&*", "+@all"}
}

// TestCredentialsRedisACL: an ACL user whose password holds every awkward character, from
// ADMITTER_REDIS_USERNAME and ADMITTER_REDIS_PASSWORD_FILE, then percent-encoded in the URL; a
// wrong password is Redis' WRONGPASS, permanent, and never shown.
func TestCredentialsRedisACL(t *testing.T) {
	t.Parallel()
	redis := testenv.StartRedisWith(t, aclUser(nastyPassword)...)
	w := newWorldWith(t, configPlans, redis)
	w.admitsWith(1, secretParts, "ADMITTER_REDIS_USERNAME=admitter", "ADMITTER_REDIS_PASSWORD_FILE="+writeSecret(t, "pw", nastyPassword+"\n"))
	u := "redis://" + url.UserPassword("admitter", nastyPassword).String() + "@" + redis.Addr
	w.admitsWith(2, secretParts, "ADMITTER_REDIS_URL="+u)
	w.refuses([]string{"Wr0ngPw"}, []string{"authentication refused by redis", "WRONGPASS"},
		"ADMITTER_REDIS_USERNAME=admitter", "ADMITTER_REDIS_PASSWORD=Wr0ngPw@#")
	w.refuses(nil, []string{"authentication refused by redis"}) // no credentials at all
}

// TestCredentialsRedisTLS: rediss:// with the server's CA in ADMITTER_REDIS_CA; a server whose
// certificate is from another CA is "unknown certificate authority", permanent. Then mutual TLS
// with an ACL user (ADMITTER_REDIS_CERT, _KEY, _USERNAME, _PASSWORD), which `admitter inspect`
// uses too; without the client certificate, the server's refusal, permanent.
func TestCredentialsRedisTLS(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t, "redis")
	redis := testenv.StartRedisTLS(t, ca, false)
	w := newWorldWith(t, configPlans, redis)
	if !strings.HasPrefix(w.redis.URL(), "rediss://") {
		t.Fatalf("the TLS server's URL is %s", w.redis.URL())
	}
	w.admitsWith(1, nil, "ADMITTER_REDIS_CA="+ca.CertFile)
	other := testenv.NewCA(t, "other")
	w.refuses(nil, []string{"unknown certificate authority"}, "ADMITTER_REDIS_CA="+other.CertFile)

	const pw = "Kx9w@Lp2q#Zr5t"
	mutual := testenv.StartRedisTLS(t, ca, true, aclUser(pw)...)
	w = newWorldWith(t, configPlans, mutual)
	cert, key := ca.Client(t, "admitter")
	creds := []string{"ADMITTER_REDIS_CA=" + ca.CertFile, "ADMITTER_REDIS_CERT=" + cert, "ADMITTER_REDIS_KEY=" + key,
		"ADMITTER_REDIS_USERNAME=admitter", "ADMITTER_REDIS_PASSWORD=" + pw}
	w.admitsWith(1, []string{"Kx9w"}, creds...)
	code, stdout, stderr := runBinary(t, w.env(creds...), "inspect", "acme")
	if code != 0 || !strings.Contains(stdout, "tenant acme, plan gold, read from Redis rediss://127.0.0.1") {
		t.Errorf("admitter inspect: exit %d\n%s%s", code, stdout, stderr)
	}
	noSecret(t, "admitter inspect", stdout+stderr)
	w.refuses([]string{"Kx9w"}, []string{"the server wants a client certificate"}, creds[0], creds[3], creds[4])
}

// TestCredentialsRedisSentinel: a URL naming a sentinel and the master set (?master_set=), the
// sentinel asking a password of its own (ADMITTER_REDIS_SENTINEL_PASSWORD_FILE) and the servers
// another (ADMITTER_REDIS_PASSWORD): the buckets live on the master, and after a failover on
// the promoted replica (fail mode closed: a job goes only if the new master answers). A wrong
// sentinel password is the sentinel's refusal, permanent.
func TestCredentialsRedisSentinel(t *testing.T) {
	t.Parallel()
	const serverPW, sentinelPW = "Kx9w-server#1", "Lp2q-sentinel@2"
	master := testenv.StartRedisWith(t, "--requirepass", serverPW)
	_, masterPort, _ := strings.Cut(master.Addr, ":")
	replica := testenv.StartRedisWith(t, "--requirepass", serverPW, "--masterauth", serverPW, "--replicaof", "127.0.0.1", masterPort)
	sentinel := testenv.StartRedisSentinel(t, master, "buckets", serverPW, sentinelPW)
	w := newWorldWith(t, configPlans, master)
	sentinelURL := "ADMITTER_REDIS_URL=redis://" + sentinel.Addr + "?master_set=buckets"
	creds := []string{sentinelURL, "ADMITTER_REDIS_PASSWORD=" + serverPW,
		"ADMITTER_REDIS_SENTINEL_PASSWORD_FILE=" + writeSecret(t, "sentinel-pw", sentinelPW+"\n")}
	w.refuses([]string{"Kx9w", "Wr0ng"}, []string{"authentication refused by redis"}, sentinelURL,
		"ADMITTER_REDIS_PASSWORD="+serverPW, "ADMITTER_REDIS_SENTINEL_PASSWORD=Wr0ng")

	client := func(addr, pw string) rueidis.Client {
		t.Helper()
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: pw, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients := map[string]rueidis.Client{master.Addr: client(master.Addr, serverPW), replica.Addr: client(replica.Addr, serverPW)}
	// info is a field of the server's INFO: role, or a command's stats (scripts run on a replica
	// arrive as their effects, so a server ran the admitter's scripts only as a master).
	info := func(addr, section, field string) string {
		c := clients[addr]
		text, err := c.Do(ctx, c.B().Info().Section(section).Build()).ToString()
		if err != nil {
			return "" // a role change closes the connections; asked again
		}
		for _, l := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
				return v
			}
		}
		return ""
	}
	ranScripts := func(addr string) bool {
		return info(addr, "commandstats", "cmdstat_fcall") != "" || info(addr, "commandstats", "cmdstat_evalsha") != "" || info(addr, "commandstats", "cmdstat_eval") != ""
	}

	p := w.start(append(creds, "ADMITTER_FAIL_MODE=closed")...)
	w.publish("jobs.submit.acme.email", "before")
	w.read("ADMITTED", 1, 20*time.Second)
	if !ranScripts(master.Addr) || ranScripts(replica.Addr) {
		t.Errorf("scripts run on the master: %v, on the replica: %v; want the master only", ranScripts(master.Addr), ranScripts(replica.Addr))
	}

	s := client(sentinel.Addr, sentinelPW)
	waitFor(t, 30*time.Second, "the sentinel to fail over to the replica", func() bool {
		_ = s.Do(ctx, s.B().Arbitrary("SENTINEL", "FAILOVER", "buckets").Build()).Error()
		addr, err := s.Do(ctx, s.B().Arbitrary("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "buckets").Build()).AsStrSlice()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == replica.Addr
	})
	waitFor(t, 30*time.Second, "the old master to become a replica", func() bool { return info(master.Addr, "replication", "role") == "slave" })
	w.publish("jobs.submit.acme.email", "after")
	w.read("ADMITTED", 2, 30*time.Second)
	if !ranScripts(replica.Addr) {
		t.Errorf("no script ran on the promoted replica: the admitter did not decide on it")
	}
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	noSecret(t, "the logs", p.logs.String())
}
