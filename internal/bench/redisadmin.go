package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/redis/rueidis"
)

// redisAdmin is the bench's own client of its Redis, apart from the limiters it measures: it
// sets Redis up between runs and reads what a run cost it. Its connection waits longer for an
// answer than admitter's (adminTimeout, not 300 ms): on a busy machine a FLUSHALL or a CONFIG SET
// may hold the server for a second, which admitter's client options take for a dead connection
// (a Redis paused for a second failed FLUSHALL with "i/o timeout" after 0.7 s). Its set-up steps
// are retried within setUpWithin. Safe for concurrent use.
type redisAdmin struct{ c rueidis.Client }

const (
	// adminTimeout is how long the admin client waits for an answer (rueidis' ConnWriteTimeout).
	adminTimeout = 10 * time.Second
	// setUpWithin bounds the retries of a set-up step (a FLUSHALL, a CONFIG SET).
	setUpWithin = 30 * time.Second
)

func newRedisAdmin(url string) (*redisAdmin, error) {
	opt, err := bucket.RedisClientOption(url)
	if err != nil {
		return nil, err
	}
	opt.ConnWriteTimeout = adminTimeout
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("rueidis: %w", err)
	}
	return &redisAdmin{c: c}, nil
}

func (a *redisAdmin) close() { a.c.Close() }

// flush empties Redis (FLUSHALL, retried within setUpWithin).
func (a *redisAdmin) flush(ctx context.Context) error {
	return retry(ctx, "redis FLUSHALL", setUpWithin, func(ctx context.Context) error {
		return a.c.Do(ctx, a.c.B().Flushall().Build()).Error()
	})
}

// persist turns Redis's append-only file on or off (CONFIG SET appendonly) and waits until it is
// in effect with no rewrite in progress, within setUpWithin.
func (a *redisAdmin) persist(ctx context.Context, on bool) error {
	want, enabled := "no", "0"
	if on {
		want, enabled = "yes", "1"
	}
	return retry(ctx, "redis appendonly "+want+" in effect", setUpWithin, func(ctx context.Context) error {
		if err := a.c.Do(ctx, a.c.B().ConfigSet().ParameterValue().ParameterValue("appendonly", want).Build()).Error(); err != nil {
			return fmt.Errorf("CONFIG SET appendonly %s: %w", want, err)
		}
		info, err := a.info(ctx, "persistence")
		if err != nil {
			return err
		}
		if got, rewriting := infoField(info, "aof_enabled"), infoField(info, "aof_rewrite_in_progress"); got != enabled || rewriting != "0" {
			return fmt.Errorf("aof_enabled:%s aof_rewrite_in_progress:%s", got, rewriting)
		}
		return nil
	})
}

// info is Redis's INFO of sections.
func (a *redisAdmin) info(ctx context.Context, sections ...string) (string, error) {
	info, err := a.c.Do(ctx, a.c.B().Info().Section(sections...).Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("redis INFO %s: %w", strings.Join(sections, " "), err)
	}
	return info, nil
}

// redisState is what state reads of a Redis server: every command call so far, its CPU time
// (µs, user and system), its memory in use and its keys.
type redisState struct{ calls, cpuMicros, memory, keys int64 }

func (a *redisAdmin) state(ctx context.Context) (redisState, error) {
	info, err := a.info(ctx, "commandstats", "cpu", "memory", "keyspace")
	if err != nil {
		return redisState{}, err
	}
	var st redisState
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			if _, v, ok := strings.Cut(rest, ":calls="); ok {
				v, _, _ = strings.Cut(v, ",")
				n, _ := strconv.ParseInt(v, 10, 64)
				st.calls += n
			}
		}
	}
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, _ := strconv.ParseFloat(infoField(info, f), 64)
		st.cpuMicros += int64(v * 1e6)
	}
	st.memory, _ = strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
	if db := infoField(info, "db0"); db != "" {
		keys, _, _ := strings.Cut(strings.TrimPrefix(db, "keys="), ",")
		st.keys, _ = strconv.ParseInt(keys, 10, 64)
	}
	return st, nil
}

// calls sums the calls of the commands a client of admitter sends.
func (a *redisAdmin) calls(ctx context.Context) (int64, error) {
	info, err := a.info(ctx, "commandstats")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, cmd := range []string{"fcall", "fcall_ro", "evalsha", "eval", "info", "ping"} {
		v := infoField(info, "cmdstat_"+cmd)
		if calls, ok := strings.CutPrefix(v, "calls="); ok {
			calls, _, _ = strings.Cut(calls, ",")
			k, _ := strconv.ParseInt(calls, 10, 64)
			n += k
		}
	}
	return n, nil
}

// infoField reads one field of a Redis INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
