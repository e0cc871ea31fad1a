package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/admitter/admitter/deadletter"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const deadUsage = `usage: admitter dead COMMAND

  list [--code C] [--tenant T] [--limit N] [--scan N]
        the newest dead letters (at most N, default 100), newest first, among the --scan newest
        of the dead stream (default 10000): sequence, time, tenant, code, subject, detail, and
        when each was replayed
  replay (--seq N... | --code C | --tenant T) [--set-header Name=Value]... [--drop-header Name]...
         [--dry-run] [--scan N]
        publish dead letters back to the input subject they came from, each exactly once:
        the given sequences, or every dead letter of a code and/or a tenant not replayed yet;
        --set-header and --drop-header (repeatable) change its headers first, e.g.
        --set-header Admit-Weight=2 mends an invalid-weight job, --drop-header Admit-Max-Wait
        replays an expired one without its own bound (a replay's bound counts from the
        replay; names match without regard to case; Nats-*, Admit-Replay-Of and Admit-Error*
        are the replay's own);
        --dry-run says what would be replayed and publishes nothing

It reads ADMITTER_NATS_URL (unset: the embedded server on 127.0.0.1), ADMITTER_STREAM_IN,
ADMITTER_STREAM_DEAD, ADMITTER_SUBJECT_IN and ADMITTER_SUBJECT_DEAD like the service. A replay is
recorded in the key-value bucket <ADMITTER_STREAM_DEAD>_replays and carries
Nats-Msg-Id admitter:r:<dead stream>:<sequence>: replayed again, it is not published again.
The record says who replayed it, when, and which headers were set and dropped.
`

// deadArgs is what `admitter dead` was asked.
type deadArgs struct {
	cmd          string // list or replay
	code, tenant string
	seqs         []uint64
	limit, scan  int
	dryRun       bool
	edit         deadletter.Edit // replay: --set-header and --drop-header
}

// parseDeadArgs reads the arguments of `admitter dead`. Flags take their value as the next
// argument or after '='; --seq takes one or more sequences (also comma separated) and may be
// repeated; so may --set-header Name=Value and --drop-header Name, each naming a header once.
func parseDeadArgs(args []string) (deadArgs, error) {
	var a deadArgs
	if len(args) == 0 {
		return a, errors.New("want a command: list or replay")
	}
	a.cmd, args = args[0], args[1:]
	if a.cmd != "list" && a.cmd != "replay" {
		return a, fmt.Errorf("unknown command %q: want list or replay", a.cmd)
	}
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		if !strings.HasPrefix(name, "--") && !strings.HasPrefix(name, "-") {
			return a, fmt.Errorf("unexpected argument %q", args[i])
		}
		name = "--" + strings.TrimLeft(name, "-")
		next := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		num := func(what string) (int, error) {
			v, err := next()
			if err != nil {
				return 0, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > deadletter.MaxScan {
				return 0, fmt.Errorf("%s must be an integer from 1 to %d, got %q", what, deadletter.MaxScan, v)
			}
			return n, nil
		}
		var err error
		switch name {
		case "--code":
			var v string
			if v, err = next(); err == nil {
				if v == "" {
					err = errors.New("--code needs a code, such as unknown-tenant")
				}
				a.code = v
			}
		case "--tenant":
			var v string
			if v, err = next(); err == nil {
				if v == "" || strings.ContainsAny(v, " \t\r\n.*>") {
					err = fmt.Errorf("--tenant %q is not a tenant name", v)
				}
				a.tenant = v
			}
		case "--limit":
			a.limit, err = num("--limit")
		case "--scan":
			a.scan, err = num("--scan")
		case "--dry-run":
			if hasVal {
				err = errors.New("--dry-run takes no value")
			}
			a.dryRun = true
		case "--set-header":
			var v, name, value string
			if v, err = next(); err == nil {
				if name, value, err = deadletter.ParseSetHeader(v); err == nil {
					if _, twice := a.edit.Set[name]; twice {
						err = fmt.Errorf("%s is set twice: a header is set to one value", name)
					} else {
						if a.edit.Set == nil {
							a.edit.Set = map[string]string{}
						}
						a.edit.Set[name] = value
						err = a.edit.Validate() // the same header under another spelling, or dropped too
					}
				}
				if err != nil {
					err = fmt.Errorf("--set-header %q: %w", v, err)
				}
			}
		case "--drop-header":
			var v string
			if v, err = next(); err == nil {
				a.edit.Drop = append(a.edit.Drop, v)
				if err = a.edit.Validate(); err != nil {
					err = fmt.Errorf("--drop-header %q: %w", v, err)
				}
			}
		case "--seq":
			var vals []string
			if hasVal {
				vals = []string{val}
			} else {
				for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
					i++
					vals = append(vals, args[i])
				}
			}
			if len(vals) == 0 {
				err = errors.New("--seq needs one or more sequence numbers")
			}
			for _, v := range vals {
				for _, s := range strings.Split(v, ",") {
					n, perr := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
					if perr != nil || n == 0 {
						err = fmt.Errorf("--seq %q is not a sequence number (an integer ≥ 1)", s)
						break
					}
					a.seqs = append(a.seqs, n)
				}
			}
		default:
			err = fmt.Errorf("unknown flag %s", name)
		}
		if err != nil {
			return a, err
		}
	}
	switch a.cmd {
	case "list":
		if len(a.seqs) > 0 || a.dryRun || !a.edit.IsZero() {
			return a, errors.New("list takes --code, --tenant, --limit and --scan only")
		}
	case "replay":
		if a.limit != 0 {
			return a, errors.New("replay takes no --limit: it replays every dead letter selected")
		}
		if (len(a.seqs) > 0) == (a.code != "" || a.tenant != "") {
			return a, errors.New("replay wants either --seq N... or --code C and/or --tenant T")
		}
	}
	return a, nil
}

// runDead is `admitter dead ...`; it returns the exit status.
func runDead(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, deadUsage)
		return 0
	}
	a, err := parseDeadArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "admitter dead: %v\n%s", err, deadUsage)
		return 2
	}
	c, err := loadConfig(env)
	if err != nil {
		fmt.Fprintf(stderr, "admitter: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url := c.NATSURL
	if url == "" {
		url = fmt.Sprintf("nats://127.0.0.1:%d", c.EmbeddedNATSPort)
	}
	nc, err := nats.Connect(url, nats.Name("admitter-dead"), nats.Timeout(5*time.Second))
	if err != nil {
		fmt.Fprintf(stderr, "admitter dead: connect to NATS at %s: %v\n", redact(url), err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "admitter dead: %v\n", err)
		return 1
	}
	store, err := deadletter.Open(ctx, deadletter.Config{JetStream: js, In: c.in, Dead: c.dead, StreamIn: c.StreamIn, StreamDead: c.StreamDead, Replicas: c.StreamReplicas})
	if err != nil {
		fmt.Fprintf(stderr, "admitter dead: %v\n", err)
		return 1
	}
	if a.cmd == "list" {
		letters, stats, err := store.List(ctx, deadletter.Filter{Code: wire.Code(a.code), Tenant: a.tenant, Limit: a.limit, Scan: a.scan})
		if err != nil {
			fmt.Fprintf(stderr, "admitter dead list: %v\n", err)
			return 1
		}
		printLetters(stdout, letters, stats)
		return 0
	}
	seqs := a.seqs
	if len(seqs) == 0 {
		letters, _, err := store.List(ctx, deadletter.Filter{Code: wire.Code(a.code), Tenant: a.tenant, Limit: deadletter.MaxScan, Scan: a.scan})
		if err != nil {
			fmt.Fprintf(stderr, "admitter dead replay: %v\n", err)
			return 1
		}
		for i := len(letters) - 1; i >= 0; i-- { // oldest first
			if letters[i].Replay == nil {
				seqs = append(seqs, letters[i].Seq)
			}
		}
	}
	res, err := store.ReplayEdited(ctx, seqs, "cli: "+whoami(), a.edit, a.dryRun)
	if err != nil { // checked by parseDeadArgs already
		fmt.Fprintf(stderr, "admitter dead replay: %v\n", err)
		return 2
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tOUTCOME\tINPUT SUBJECT\tINPUT SEQ\tNOTE")
	failed := 0
	for _, r := range res {
		in, note := "", r.Detail
		if r.Outcome == deadletter.WouldReplay && !a.edit.IsZero() {
			note = "would " + a.edit.String()
		}
		if r.Replay != nil {
			in = strconv.FormatUint(r.Replay.InputSeq, 10)
			if r.Outcome == deadletter.AlreadyDone {
				note = "replayed " + r.Replay.At.Format(time.RFC3339) + " by " + r.Replay.By
			}
			if !r.Replay.Edit.IsZero() {
				note = strings.TrimPrefix(note+"; "+r.Replay.Edit.String(), "; ")
			}
		}
		if r.Err != nil {
			note, failed = r.Err.Error(), failed+1
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Seq, r.Outcome, r.Input, in, note)
	}
	tw.Flush()
	if len(res) == 0 {
		fmt.Fprintln(stdout, "nothing to replay")
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func printLetters(w io.Writer, letters []deadletter.Letter, stats deadletter.Stats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tTENANT\tCODE\tSUBJECT\tREPLAYED\tDETAIL")
	for _, l := range letters {
		replayed := "-"
		if l.Replay != nil {
			replayed = l.Replay.At.Format(time.RFC3339)
		}
		detail := l.Detail
		if len(detail) > 120 {
			detail = detail[:117] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Seq, l.Time.UTC().Format(time.RFC3339), l.Tenant, l.Code, l.Subject, replayed, detail)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d shown, newest first, among the %d newest of %d dead letters\n", len(letters), stats.Scanned, stats.Total)
}

// whoami names the user of the CLI for the replay record: user@host.
func whoami() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
