package tests

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// securedWorld is a world around servers that want credentials; the test's own connection to
// NATS uses opts.
func securedWorld(t *testing.T, srv *testenv.NATSServer, redis *testenv.RedisServer, opts ...nats.Option) *world {
	t.Helper()
	w := &world{t: t, nats: srv, redis: redis, natsURL: srv.URL(), redisURL: redis.URL()}
	w.plans = filepath.Join(t.TempDir(), "plans.yaml")
	if err := os.WriteFile(w.plans, []byte(configPlans), 0o644); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL(), opts...)
	if err != nil {
		t.Fatalf("the test's own connection: %v", err)
	}
	t.Cleanup(nc.Close)
	w.nc = nc
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return w
}

// admitsWith starts the admitter with the overrides, checks that a job goes through (the n-th
// on ADMITTED), stops it, and checks that none of secrets shows in its logs.
func (w *world) admitsWith(n int, secrets []string, over ...string) {
	w.t.Helper()
	p := w.start(over...)
	w.publish("jobs.submit.acme.email", "hello")
	w.read("ADMITTED", n, 20*time.Second)
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		w.t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	for _, s := range secrets {
		if strings.Contains(p.logs.String(), s) {
			w.t.Errorf("the logs show the secret %q:\n%s", s, p.logs.String())
		}
	}
}

// refuses runs the admitter with the overrides and a 2s connect timeout, and checks that it
// gives up with the server's reason (each of want) marked permanent and logged once, and no
// secret.
func (w *world) refuses(secrets, want []string, over ...string) {
	w.t.Helper()
	code, stdout, stderr := runBinary(w.t, append(w.env(over...), "ADMITTER_CONNECT_TIMEOUT=2s"))
	out := stdout + stderr
	if code != 1 {
		w.t.Errorf("exit status %d, want 1 (gave up after ADMITTER_CONNECT_TIMEOUT)\n%s", code, out)
	}
	for _, s := range append(want, "permanent=true", "ADMITTER_CONNECT_TIMEOUT") {
		if !strings.Contains(out, s) {
			w.t.Errorf("the output does not say %q:\n%s", s, out)
		}
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			w.t.Errorf("the output shows the secret %q:\n%s", s, out)
		}
	}
	if n := strings.Count(out, "needs a change of configuration"); n != 1 {
		w.t.Errorf("the permanent failure logged %d times, want once:\n%s", n, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "permanent=true") {
			w.t.Logf("refused: %s", l)
		}
	}
}

// tlsNATS is a NATS server with a certificate from ca; with verify, clients must present one
// from ca too.
func tlsNATS(t *testing.T, ca *testenv.CA, verify bool) *testenv.NATSServer {
	t.Helper()
	cert, key := ca.Server(t, "nats-server")
	conf, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cert, KeyFile: key, CaFile: ca.CertFile, Verify: verify})
	if err != nil {
		t.Fatal(err)
	}
	return testenv.StartNATSWith(t, func(o *server.Options) {
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = conf, true, verify, 2
	})
}

// TestCredentialsNATSUserPassword: a user and a password holding every awkward character, from
// ADMITTER_NATS_USER and ADMITTER_NATS_PASSWORD_FILE, then percent-encoded in the URL; a wrong
// password is the server's "authorization violation", permanent, and never shown.
func TestCredentialsNATSUserPassword(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATSWith(t, func(o *server.Options) { o.Username, o.Password = "admitter", nastyPassword })
	w := securedWorld(t, srv, testenv.StartPersistentRedis(t), nats.UserInfo("admitter", nastyPassword))
	w.admitsWith(1, secretParts, "ADMITTER_NATS_USER=admitter", "ADMITTER_NATS_PASSWORD_FILE="+writeSecret(t, "pw", nastyPassword+"\n"))
	u := strings.Replace(srv.URL(), "nats://", "nats://"+url.UserPassword("admitter", nastyPassword).String()+"@", 1)
	w.admitsWith(2, secretParts, "ADMITTER_NATS_URL="+u)
	w.refuses([]string{"Wr0ngPw"}, []string{"authorization violation"}, "ADMITTER_NATS_USER=admitter", "ADMITTER_NATS_PASSWORD=Wr0ngPw@#")
}

// TestCredentialsNATSToken: ADMITTER_NATS_TOKEN, and the same token from ADMITTER_NATS_TOKEN_FILE.
func TestCredentialsNATSToken(t *testing.T) {
	t.Parallel()
	const token = "Kx9wLp2qZr5t-token"
	srv := testenv.StartNATSWith(t, func(o *server.Options) { o.Authorization = token })
	w := securedWorld(t, srv, testenv.StartPersistentRedis(t), nats.Token(token))
	w.admitsWith(1, []string{"Kx9w"}, "ADMITTER_NATS_TOKEN="+token)
	w.admitsWith(2, []string{"Kx9w"}, "ADMITTER_NATS_TOKEN_FILE="+writeSecret(t, "token", token+"\n"))
}

// TestCredentialsNATSNkey: an nkey user seed file (ADMITTER_NATS_NKEY), the server knowing only
// the public key.
func TestCredentialsNATSNkey(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := writeSecret(t, "admitter.nk", string(seed)+"\n")
	srv := testenv.StartNATSWith(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	w := securedWorld(t, srv, testenv.StartPersistentRedis(t), opt)
	w.admitsWith(1, []string{string(seed)}, "ADMITTER_NATS_NKEY="+seedFile)

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	w.refuses([]string{string(otherSeed)}, []string{"authorization violation"}, "ADMITTER_NATS_NKEY="+writeSecret(t, "other.nk", string(otherSeed)))
}

// TestCredentialsNATSCredsFile: operator mode, as nsc and the account server set it up: an
// operator, an account with JetStream, a user whose JWT and seed are in a .creds file
// (ADMITTER_NATS_CREDS).
func TestCredentialsNATSCredsFile(t *testing.T) {
	t.Parallel()
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	operator, _ := nkeys.CreateOperator()
	opPub := must(operator.PublicKey())
	opJWT := must(jwt.NewOperatorClaims(opPub).Encode(operator))
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	account := func(js bool) (nkeys.KeyPair, string) {
		kp, _ := nkeys.CreateAccount()
		pub := must(kp.PublicKey())
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		if err := resolver.Store(pub, must(ac.Encode(operator))); err != nil {
			t.Fatal(err)
		}
		return kp, pub
	}
	_, sysPub := account(false)
	acc, _ := account(true)
	creds := func(name string) string {
		user, _ := nkeys.CreateUser()
		uc := jwt.NewUserClaims(must(user.PublicKey()))
		uc.Name = name
		seed, _ := user.Seed()
		b, err := jwt.FormatUserConfig(must(uc.Encode(acc)), seed)
		if err != nil {
			t.Fatal(err)
		}
		return writeSecret(t, name+".creds", string(b))
	}
	srv := testenv.StartNATSWith(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{opClaims}
		o.AccountResolver = resolver
		o.SystemAccount = sysPub
	})
	w := securedWorld(t, srv, testenv.StartPersistentRedis(t), nats.UserCredentials(creds("test")))
	file := creds("admitter")
	b, _ := os.ReadFile(file)
	seedLine := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SU") {
			seedLine = l
		}
	}
	w.admitsWith(1, []string{seedLine}, "ADMITTER_NATS_CREDS="+file)
}

// TestCredentialsNATSTLS: a tls:// URL with the server's CA in ADMITTER_NATS_CA; then mutual
// TLS (ADMITTER_NATS_CERT, ADMITTER_NATS_KEY) on a nats:// URL, the CA making it TLS; a server
// whose certificate is from another CA is "unknown certificate authority", permanent.
func TestCredentialsNATSTLS(t *testing.T) {
	t.Parallel()
	ca := testenv.NewCA(t, "nats")
	redis := testenv.StartPersistentRedis(t)

	srv := tlsNATS(t, ca, false)
	w := securedWorld(t, srv, redis, nats.RootCAs(ca.CertFile))
	tlsURL := "tls://" + srv.Addr().String()
	w.admitsWith(1, nil, "ADMITTER_NATS_URL="+tlsURL, "ADMITTER_NATS_CA="+ca.CertFile)
	other := testenv.NewCA(t, "other")
	w.refuses(nil, []string{"unknown certificate authority"}, "ADMITTER_NATS_URL="+tlsURL, "ADMITTER_NATS_CA="+other.CertFile)

	mutual := tlsNATS(t, ca, true)
	cert, key := ca.Client(t, "admitter")
	testCert, testKey := ca.Client(t, "test")
	w = securedWorld(t, mutual, redis, nats.RootCAs(ca.CertFile), nats.ClientCert(testCert, testKey))
	natsURL := "ADMITTER_NATS_URL=nats://" + mutual.Addr().String()
	w.admitsWith(1, nil, natsURL, "ADMITTER_NATS_CA="+ca.CertFile, "ADMITTER_NATS_CERT="+cert, "ADMITTER_NATS_KEY="+key)
	w.refuses(nil, []string{"the server wants a client certificate"}, natsURL, "ADMITTER_NATS_CA="+ca.CertFile)
	stranger, strangerKey := other.Client(t, "stranger")
	w.refuses(nil, []string{"the server wants a client certificate"}, natsURL, "ADMITTER_NATS_CA="+ca.CertFile,
		"ADMITTER_NATS_CERT="+stranger, "ADMITTER_NATS_KEY="+strangerKey)
}

// TestCredentialsPlansCommandUsesThem: `admitter plans` connects with the same credentials as
// the service.
func TestCredentialsPlansCommandUsesThem(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATSWith(t, func(o *server.Options) { o.Username, o.Password = "admitter", nastyPassword })
	w := securedWorld(t, srv, testenv.StartPersistentRedis(t), nats.UserInfo("admitter", nastyPassword))
	env := append(w.env("ADMITTER_PLANS_KV=plans", "ADMITTER_NATS_USER=admitter"), "ADMITTER_NATS_PASSWORD="+nastyPassword)
	code, stdout, stderr := runBinary(t, env, "plans", "push", w.plans)
	if code != 0 || !strings.Contains(stdout, "pushed") {
		t.Fatalf("plans push: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runBinary(t, env, "plans", "show")
	if code != 0 || !strings.Contains(stdout, "gold") {
		t.Errorf("plans show: exit %d\n%s%s", code, stdout, stderr)
	}
	noSecret(t, "admitter plans", stdout+stderr)
}
