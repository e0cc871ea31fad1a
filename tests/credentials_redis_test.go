package tests

import (
	"net/url"
	"strings"
	"testing"

	"github.com/admitter/admitter/internal/testenv"
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
