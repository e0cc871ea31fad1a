package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"
)

// runScenarios runs list in turn, each on e with a scope of its own as its testenv.TB: what a
// scenario starts through it is stopped, and the directories it makes removed, when it ends. A
// scenario that fails (an error, a panic, a server that could not start, a readiness that never
// came) is recorded in rep.Failures with its error, its section stays absent, and the next one
// runs. When ctx ends the run stops there, with ctx's error: an interruption is no failure of
// the scenario under way.
func runScenarios(ctx context.Context, e env, p *progress, rep *Report, list []scenario) error {
	for _, sc := range list {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		begin := time.Now()
		s := &scope{log: e.o.logger()}
		e.tb = s
		err := s.run(func() error { return sc.run(ctx, &e, p, rep) })
		s.close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			rep.Failures = append(rep.Failures, Failure{Scenario: sc.name, Error: err.Error(), AfterS: round(time.Since(begin).Seconds(), 1)})
			p.say(fmt.Sprintf("%s: failed: %v", sc.name, err))
		}
	}
	return nil
}

// Failure is a scenario that could not be measured: its section of the report is absent and its
// goals are not evaluated.
type Failure struct {
	Scenario string `json:"scenario"`
	// Error is why, in full (a server's log included).
	Error string `json:"error"`
	// AfterS is how long the scenario ran before it failed.
	AfterS float64 `json:"after_s"`
}

// scope is the testenv.TB of a run or of one scenario. Cleanup functions run at close, newest
// first (servers stop before their directories go); TempDir directories are removed then.
// Fatalf (testenv's: a server that could not start) unwinds to run, which returns it as an
// error. Fatalf must be called from run's goroutine, as testing's is.
type scope struct {
	log      *slog.Logger
	mu       sync.Mutex
	cleanups []func()
}

// fatal is the panic of scope.Fatalf, recovered by scope.run.
type fatal struct{ error }

func (s *scope) Helper() {}

func (s *scope) Logf(format string, args ...any) { s.log.Info(fmt.Sprintf(format, args...)) }

func (s *scope) Fatalf(format string, args ...any) {
	panic(fatal{fmt.Errorf(format, args...)})
}

func (s *scope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *scope) TempDir() string {
	dir, err := os.MkdirTemp("", "admitter-bench-")
	if err != nil {
		s.Fatalf("temporary directory: %v", err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// run calls f and returns its error; a Fatalf of s, or a panic, becomes the error (a panic's
// with its stack).
func (s *scope) run(f func() error) (err error) {
	defer func() {
		switch v := recover().(type) {
		case nil:
		case fatal:
			err = v.error
		default:
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		}
	}()
	return f()
}

// close runs the cleanup functions, newest first. Closing twice is safe.
func (s *scope) close() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
