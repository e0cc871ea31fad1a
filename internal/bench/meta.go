package bench

import (
	"context"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// newMeta describes this process and machine; the git commit is read from the working
// directory's repository when git is there (empty otherwise).
func newMeta(ctx context.Context, start time.Time, quick bool) Meta {
	m := Meta{
		Timestamp:         start.UTC().Format(time.RFC3339),
		GoVersion:         runtime.Version(),
		GOOS:              runtime.GOOS,
		GOARCH:            runtime.GOARCH,
		NumCPU:            runtime.NumCPU(),
		GOMAXPROCS:        runtime.GOMAXPROCS(0),
		NATSServerVersion: server.VERSION,
		Quick:             quick,
	}
	m.GitCommit, m.GitDirty = gitCommit(ctx)
	return m
}

// gitCommit is HEAD's hash and whether the work tree has changes, or "" when unknown.
func gitCommit(ctx context.Context) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	return commit, err == nil && len(strings.TrimSpace(string(st))) > 0
}
