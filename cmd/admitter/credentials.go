package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/redis/rueidis"
)

// Credentials and TLS for NATS and Redis, as deployments hand them out: files mounted from a
// secret store (creds, nkey seeds, certificates, keys) and secrets in variables or in files
// (<NAME>_FILE). Every NATS connection of the process (the service, `plans`, `inspect`, the
// demo) gets its options from natsOptions, every Redis client from redisClientOption.

// secretVars are the variables holding a secret: check-config prints them masked, and each may
// be given as <NAME>_FILE instead, the file's content without one trailing newline.
var secretVars = map[string]func(*config) *string{
	"ADMITTER_NATS_URL":                func(c *config) *string { return &c.NATSURL },
	"ADMITTER_NATS_PASSWORD":           func(c *config) *string { return &c.NATSPassword },
	"ADMITTER_NATS_TOKEN":              func(c *config) *string { return &c.NATSToken },
	"ADMITTER_REDIS_URL":               func(c *config) *string { return &c.RedisURL },
	"ADMITTER_REDIS_PASSWORD":          func(c *config) *string { return &c.RedisPassword },
	"ADMITTER_REDIS_SENTINEL_PASSWORD": func(c *config) *string { return &c.SentinelPassword },
	"ADMITTER_HTTP_TOKEN":              func(c *config) *string { return &c.HTTPToken },
	"ADMITTER_CONSOLE_TOKEN":           func(c *config) *string { return &c.ConsoleToken },
}

// readSecretFiles sets each secret given as <NAME>_FILE from its file. A variable and its file
// both set is an error naming both; so is a file that cannot be read or is empty.
func (c *config) readSecretFiles(environ map[string]string) error {
	for _, name := range sortedKeys(secretVars) {
		path := environ[name+"_FILE"]
		if path == "" {
			continue
		}
		if environ[name] != "" {
			return fmt.Errorf("%s and %s_FILE are both set: keep one", name, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s_FILE: cannot read it: %w", name, err)
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if s == "" {
			return fmt.Errorf("%s_FILE: %s is empty", name, path)
		}
		*secretVars[name](c) = s
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// credentialEnv is the credential and TLS variables of environ (with their _FILE forms) for a
// NATS server (forNATS) and a Redis (forRedis) given by URL: what the demo passes on.
func credentialEnv(environ map[string]string, forNATS, forRedis bool) map[string]string {
	out := map[string]string{}
	for k, v := range environ {
		name := strings.TrimSuffix(k, "_FILE")
		switch {
		case forNATS && strings.HasPrefix(name, "ADMITTER_NATS_") && slices.Contains(credentialNames, name),
			forRedis && strings.HasPrefix(name, "ADMITTER_REDIS_") && slices.Contains(credentialNames, name):
			out[k] = v
		}
	}
	return out
}

// credentialNames are the credential and TLS variables besides the URLs.
var credentialNames = []string{
	"ADMITTER_NATS_CREDS", "ADMITTER_NATS_NKEY", "ADMITTER_NATS_USER", "ADMITTER_NATS_PASSWORD", "ADMITTER_NATS_TOKEN",
	"ADMITTER_NATS_CA", "ADMITTER_NATS_CERT", "ADMITTER_NATS_KEY",
	"ADMITTER_REDIS_USERNAME", "ADMITTER_REDIS_PASSWORD", "ADMITTER_REDIS_CA", "ADMITTER_REDIS_CERT", "ADMITTER_REDIS_KEY",
	"ADMITTER_REDIS_SENTINEL_USERNAME", "ADMITTER_REDIS_SENTINEL_PASSWORD",
}

// describeSecret is how check-config prints variable name holding val: URLs with their
// passwords masked, other secrets masked whole; ok is false for a variable that is no secret.
func describeSecret(name, val string) (out string, ok bool) {
	if _, secret := secretVars[name]; !secret || val == "" {
		return "", false
	}
	switch name {
	case "ADMITTER_NATS_URL":
		return redact(val), true
	case "ADMITTER_REDIS_URL":
		return redactURL(val), true
	}
	return "(set, masked)", true
}

// checkCredentials validates the credential and TLS settings: files exist and hold what they
// should, modes that exclude each other are not combined, and URLs carry their credentials in a
// form every client reads the same way. Errors name the variables and files, never a secret.
func (c *config) checkCredentials() error {
	if err := c.checkNATSCredentials(); err != nil {
		return err
	}
	return c.checkRedisCredentials()
}

func (c *config) checkNATSCredentials() error {
	set := []struct{ name, v string }{
		{"ADMITTER_NATS_CREDS", c.NATSCreds}, {"ADMITTER_NATS_NKEY", c.NATSNkey},
		{"ADMITTER_NATS_USER", c.NATSUser}, {"ADMITTER_NATS_PASSWORD", c.NATSPassword}, {"ADMITTER_NATS_TOKEN", c.NATSToken},
		{"ADMITTER_NATS_CA", c.NATSCA}, {"ADMITTER_NATS_CERT", c.NATSCert}, {"ADMITTER_NATS_KEY", c.NATSKey},
	}
	if c.NATSURL == "" {
		for _, s := range set {
			if s.v != "" {
				return fmt.Errorf("%s is set but ADMITTER_NATS_URL is unset: the embedded server takes no credentials; set ADMITTER_NATS_URL to the server they are for", s.name)
			}
		}
		return nil
	}
	urlCreds := ""
	parts := strings.Split(c.NATSURL, ",")
	for i, raw := range parts {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			return fmt.Errorf("ADMITTER_NATS_URL: server %d of %d is empty", i+1, len(parts))
		}
		u, err := checkURL("ADMITTER_NATS_URL", raw, "ADMITTER_NATS_PASSWORD (or ADMITTER_NATS_TOKEN)")
		if err != nil {
			return err
		}
		p := cutURL(raw)
		if p.hasUser && p.scheme == "" {
			return fmt.Errorf("ADMITTER_NATS_URL: server %d of %d (%s) has credentials but no scheme such as nats:// or tls://: if a password holds ',', percent-encode it (%%2C) or set it in ADMITTER_NATS_PASSWORD", i+1, len(parts), p)
		}
		if u.User != nil {
			urlCreds = "ADMITTER_NATS_URL (user information in the URL)"
		}
	}
	// One way to authenticate.
	var modes []string
	for _, m := range []struct {
		name string
		on   bool
	}{
		{urlCreds, urlCreds != ""},
		{"ADMITTER_NATS_CREDS", c.NATSCreds != ""},
		{"ADMITTER_NATS_NKEY", c.NATSNkey != ""},
		{"ADMITTER_NATS_USER", c.NATSUser != "" || c.NATSPassword != ""},
		{"ADMITTER_NATS_TOKEN", c.NATSToken != ""},
	} {
		if m.on {
			modes = append(modes, m.name)
		}
	}
	if len(modes) > 1 {
		return fmt.Errorf("%s and %s are both set: NATS takes one way to authenticate (a creds file, an nkey seed, a user and password, or a token)", modes[0], modes[1])
	}
	switch {
	case c.NATSPassword != "" && c.NATSUser == "":
		return errors.New("ADMITTER_NATS_PASSWORD is set without ADMITTER_NATS_USER (for a single secret, use ADMITTER_NATS_TOKEN)")
	case c.NATSUser != "" && c.NATSPassword == "":
		return errors.New("ADMITTER_NATS_USER is set without ADMITTER_NATS_PASSWORD (or ADMITTER_NATS_PASSWORD_FILE)")
	}
	if c.NATSCreds != "" {
		if err := checkCredsFile("ADMITTER_NATS_CREDS", c.NATSCreds); err != nil {
			return err
		}
	}
	if c.NATSNkey != "" {
		if err := checkSeedFile("ADMITTER_NATS_NKEY", c.NATSNkey); err != nil {
			return err
		}
	}
	return checkTLSFiles("ADMITTER_NATS", c.NATSCA, c.NATSCert, c.NATSKey)
}

func (c *config) checkRedisCredentials() error {
	set := []struct{ name, v string }{
		{"ADMITTER_REDIS_USERNAME", c.RedisUsername}, {"ADMITTER_REDIS_PASSWORD", c.RedisPassword},
		{"ADMITTER_REDIS_CA", c.RedisCA}, {"ADMITTER_REDIS_CERT", c.RedisCert}, {"ADMITTER_REDIS_KEY", c.RedisKey},
		{"ADMITTER_REDIS_SENTINEL_USERNAME", c.SentinelUsername}, {"ADMITTER_REDIS_SENTINEL_PASSWORD", c.SentinelPassword},
	}
	if c.RedisURL == "" {
		for _, s := range set {
			if s.v != "" {
				return fmt.Errorf("%s is set but ADMITTER_REDIS_URL is unset (in-process buckets): set ADMITTER_REDIS_URL to the server it is for", s.name)
			}
		}
		return nil
	}
	u, err := checkURL("ADMITTER_REDIS_URL", c.RedisURL, "ADMITTER_REDIS_PASSWORD")
	if err != nil {
		return err
	}
	if _, err := bucket.RedisClientOption(redactURL(c.RedisURL)); err != nil {
		return fmt.Errorf("ADMITTER_REDIS_URL: %w", err)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has && c.RedisPassword != "" {
			return fmt.Errorf("ADMITTER_REDIS_PASSWORD and the password in ADMITTER_REDIS_URL (%s) are both set: keep one", redactURL(c.RedisURL))
		}
		if u.User.Username() != "" && c.RedisUsername != "" {
			return fmt.Errorf("ADMITTER_REDIS_USERNAME and the user in ADMITTER_REDIS_URL (%s) are both set: keep one", redactURL(c.RedisURL))
		}
	}
	if !u.Query().Has("master_set") {
		for _, s := range set[5:] {
			if s.v != "" {
				return fmt.Errorf("%s is set but ADMITTER_REDIS_URL names no Sentinel master (?master_set=NAME): the sentinels' credentials are for Sentinel only", s.name)
			}
		}
	}
	if tlsURL := u.Scheme == "rediss" || u.Scheme == "valkeys"; !tlsURL {
		for _, s := range set[2:5] {
			if s.v != "" {
				return fmt.Errorf("%s is set but ADMITTER_REDIS_URL is %s:// (no TLS): use rediss://", s.name, u.Scheme)
			}
		}
	}
	return checkTLSFiles("ADMITTER_REDIS", c.RedisCA, c.RedisCert, c.RedisKey)
}

// checkCredsFile checks that a NATS creds file holds a user JWT and a user nkey seed.
func checkCredsFile(name, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: cannot read it: %w", name, err)
	}
	defer wipe(b)
	token, err := nkeys.ParseDecoratedJWT(b)
	if err == nil {
		_, err = jwt.DecodeUserClaims(token)
	}
	if err != nil { // the error may quote the file: never shown
		return fmt.Errorf("%s: %s holds no user JWT (want a .creds file, as nsc or the account server writes it: the user JWT, then the user's nkey seed)", name, path)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s: %s holds a user JWT but no user nkey seed (%v)", name, path, err)
	}
	kp.Wipe()
	return nil
}

// checkSeedFile checks that a file holds an nkey user seed (SU…), alone or decorated.
func checkSeedFile(name, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: cannot read it: %w", name, err)
	}
	defer wipe(b)
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s: %s holds no nkey user seed (want a line starting with SU, as `nk -gen user` writes it): %v", name, path, err)
	}
	kp.Wipe()
	return nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// checkTLSFiles checks prefix_CA (certificates), and prefix_CERT with prefix_KEY (a client
// certificate and its key: both or neither).
func checkTLSFiles(prefix, ca, cert, key string) error {
	if ca != "" {
		if _, err := loadCertPool(prefix+"_CA", ca); err != nil {
			return err
		}
	}
	switch {
	case cert == "" && key == "":
		return nil
	case cert == "":
		return fmt.Errorf("%s_KEY is set without %s_CERT: a client key goes with its certificate", prefix, prefix)
	case key == "":
		return fmt.Errorf("%s_CERT is set without %s_KEY: a client certificate goes with its key", prefix, prefix)
	}
	certPEM, err := os.ReadFile(cert)
	if err != nil {
		return fmt.Errorf("%s_CERT: cannot read it: %w", prefix, err)
	}
	if _, err := parseCertificates(certPEM); err != nil {
		return fmt.Errorf("%s_CERT: %s: %w", prefix, cert, err)
	}
	keyPEM, err := os.ReadFile(key)
	if err != nil {
		return fmt.Errorf("%s_KEY: cannot read it: %w", prefix, err)
	}
	defer wipe(keyPEM)
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("%s_KEY: %s is not the private key of %s_CERT (%s): %w", prefix, key, prefix, cert, err)
	}
	return nil
}

// loadCertPool reads the certificates of a CA file.
func loadCertPool(name, path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read it: %w", name, err)
	}
	certs, err := parseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", name, path, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// parseCertificates parses every CERTIFICATE block of a PEM file: at least one, and no other
// kind of block (a key in a certificate file is a mistake worth naming).
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := bytes.TrimSpace(b); len(rest) > 0; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a PEM block of type %q where a certificate (CERTIFICATE) is wanted", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no PEM certificate (want -----BEGIN CERTIFICATE-----)")
	}
	return certs, nil
}

// natsOptions are the credential and TLS options of every connection to ADMITTER_NATS_URL
// (none for the embedded server). File-based settings are read again at each connection, so a
// rotated certificate or creds file is picked up at the next reconnection.
func (c *config) natsOptions() ([]nats.Option, error) {
	if c.NATSURL == "" {
		return nil, nil
	}
	var opts []nats.Option
	switch {
	case c.NATSCreds != "":
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	case c.NATSNkey != "":
		o, err := nats.NkeyOptionFromSeed(c.NATSNkey)
		if err != nil {
			return nil, fmt.Errorf("ADMITTER_NATS_NKEY: %s: %w", c.NATSNkey, err)
		}
		opts = append(opts, o)
	case c.NATSUser != "":
		opts = append(opts, nats.UserInfo(c.NATSUser, c.NATSPassword))
	case c.NATSToken != "":
		opts = append(opts, nats.Token(c.NATSToken))
	}
	if c.NATSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSCA))
	}
	if c.NATSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSCert, c.NATSKey))
	}
	return slices.Clip(opts), nil // callers append their own options: each gets a copy
}

// redisClientOption is the client option for ADMITTER_REDIS_URL (bucket.RedisClientOption)
// with the credentials and TLS settings of the configuration. The client certificate is read
// again at each connection, so a rotated one is picked up when the client reconnects.
func (c *config) redisClientOption() (rueidis.ClientOption, error) {
	opt, err := bucket.RedisClientOption(c.RedisURL)
	if err != nil { // validated with the URL masked already: never quote it here
		return opt, fmt.Errorf("ADMITTER_REDIS_URL: %s does not parse", redactURL(c.RedisURL))
	}
	if c.RedisUsername != "" {
		opt.Username = c.RedisUsername
	}
	if c.RedisPassword != "" {
		opt.Password = c.RedisPassword
	}
	if opt.TLSConfig != nil {
		if opt.Sentinel.MasterSet != "" {
			// The URL's host is a sentinel; the master is where they say: each connection checks
			// the name it dials.
			opt.TLSConfig.ServerName = ""
		}
		if c.RedisCA != "" {
			if opt.TLSConfig.RootCAs, err = loadCertPool("ADMITTER_REDIS_CA", c.RedisCA); err != nil {
				return opt, err
			}
		}
		if c.RedisCert != "" {
			certFile, keyFile := c.RedisCert, c.RedisKey
			opt.TLSConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				cert, err := tls.LoadX509KeyPair(certFile, keyFile)
				if err != nil {
					return nil, fmt.Errorf("ADMITTER_REDIS_CERT, ADMITTER_REDIS_KEY: %w", err)
				}
				return &cert, nil
			}
		}
	}
	if opt.Sentinel.MasterSet != "" {
		// The URL's hosts are sentinels: same TLS settings and timeouts as for the master, their
		// own credentials, and their view of the master checked every 5s besides their
		// +switch-master events (rueidis recommends it: a missed event would pin the old master).
		opt.Sentinel.Dialer = opt.Dialer
		opt.Sentinel.TLSConfig = opt.TLSConfig
		opt.Sentinel.Username, opt.Sentinel.Password = c.SentinelUsername, c.SentinelPassword
		opt.Sentinel.TopologyRefreshInterval = 5 * time.Second
	}
	return opt, nil
}
