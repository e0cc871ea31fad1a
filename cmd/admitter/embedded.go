package main

import (
	_ "embed"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats-server/v2/server"
)

// examplePlans is used when ADMITTER_PLANS_FILE is unset.
//
//go:embed example-plans.yaml
var examplePlans []byte

// defaultDataDir is where the embedded server stores its streams unless ADMITTER_DATA_DIR says.
func defaultDataDir() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "admitter")
	}
	// No home directory: a per-user directory, not one shared by every user of /tmp.
	return filepath.Join(os.TempDir(), "admitter-"+strconv.Itoa(os.Getuid()))
}

// startEmbeddedNATS starts a JetStream server inside this process, on 127.0.0.1:port (0 = any
// free port), storing under dataDir, with the account mapping that spreads the input over its
// partitions (none for one). The caller shuts it down.
func startEmbeddedNATS(dataDir string, port int, ps subjects.Partitions, log *slog.Logger) (*server.Server, error) {
	storeDir := filepath.Join(dataDir, "jetstream")
	if err := os.MkdirAll(storeDir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: ADMITTER_DATA_DIR: %w", errConfig, err)
	}
	if port != 0 {
		// The server would only log a failed listen; say it plainly instead.
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("%w: embedded NATS server: %w (set ADMITTER_EMBEDDED_NATS_PORT=0 for any free port, or ADMITTER_NATS_URL to use the server already there)", errConfig, err)
		}
		_ = l.Close()
	} else {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "admitter-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
	}
	if src, dst := ps.Mapping(); src != "" {
		global := server.NewAccount(server.DEFAULT_GLOBAL_ACCOUNT)
		if err := global.AddMapping(src, dst); err != nil {
			return nil, fmt.Errorf("embedded NATS server: the partitions' mapping %q → %q: %w", src, dst, err)
		}
		opts.Accounts = []*server.Account{global}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.SetLoggerV2(natsLogger{log.With("component", "nats-server")}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS server on 127.0.0.1:%d not ready within 10s", port)
	}
	log.Info("embedded NATS server with JetStream started: producers and workers connect here",
		"url", srv.ClientURL(), "store_dir", storeDir)
	return srv, nil
}

// natsLogger passes the embedded server's warnings and errors to slog; notices go to debug.
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l natsLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l natsLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l natsLogger) Tracef(format string, v ...any)  {}
