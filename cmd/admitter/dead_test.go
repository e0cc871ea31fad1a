package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseDeadArgs(t *testing.T) {
	for _, c := range []struct {
		args string
		want string // fmt of the result, or "error: <substring>"
	}{
		{"list", "list   [] 0 0 false"},
		{"list --code unknown-tenant --tenant acme --limit 5", "list unknown-tenant acme [] 5 0 false"},
		{"list --code=too-large --scan=50", "list too-large  [] 0 50 false"},
		{"replay --seq 3 4,5 --seq 9", "replay   [3 4 5 9] 0 0 false"},
		{"replay --seq=7 --dry-run", "replay   [7] 0 0 true"},
		{"replay --tenant acme --dry-run", "replay  acme [] 0 0 true"},
		{"replay --code invalid-weight --tenant acme", "replay invalid-weight acme [] 0 0 false"},
		{"", "error: want a command"},
		{"purge", "error: unknown command"},
		{"replay", "error: either --seq"},
		{"replay --seq 1 --code x", "error: either --seq"},
		{"replay --seq", "error: one or more"},
		{"replay --seq 0", "error: not a sequence"},
		{"replay --seq x", "error: not a sequence"},
		{"replay --code x --limit 3", "error: no --limit"},
		{"list --seq 3", "error: list takes"},
		{"list --limit 0", "error: from 1"},
		{"list --limit", "error: needs a value"},
		{"list --tenant a.b", "error: not a tenant"},
		{"list --colour red", "error: unknown flag"},
		{"list acme", "error: unexpected argument"},
		{"replay --seq 1 --dry-run=yes", "error: takes no value"},
		{"replay --seq 4 --set-header Admit-Weight=2 --drop-header X-Bad --drop-header=X-Old", "replay   [4] 0 0 false set Admit-Weight=2; drop X-Bad, X-Old"},
		{"replay --code invalid-weight --set-header=Admit-Weight=2 --dry-run", "replay invalid-weight  [] 0 0 true set Admit-Weight=2"},
		{"replay --seq 4 --set-header Admit-Weight", `error: --set-header "Admit-Weight": deadletter: header edit refused: "Admit-Weight" is not Name=Value`},
		{"replay --seq 4 --set-header", "error: --set-header needs a value"},
		{"replay --seq 4 --set-header Nats-Msg-Id=x", `error: --set-header "Nats-Msg-Id=x": deadletter: header edit refused: header Nats-Msg-Id: Nats-* headers are directives to the NATS server`},
		{"replay --seq 4 --drop-header nats-expected-stream", `error: --drop-header "nats-expected-stream": deadletter: header edit refused: header nats-expected-stream: Nats-* headers`},
		{"replay --seq 4 --set-header Admit-Replay-Of=DEAD:1", "error: header Admit-Replay-Of names the dead letter the job is replayed from: the replay sets it"},
		{"replay --seq 4 --drop-header Admit-Replay-Of", "error: header Admit-Replay-Of names the dead letter"},
		{"replay --seq 4 --drop-header Admit-Error", "error: header Admit-Error says why the job was dead-lettered"},
		{"replay --seq 4 --set-header Admit-Weight=2 --set-header Admit-Weight=3", `error: --set-header "Admit-Weight=3": Admit-Weight is set twice`},
		{"replay --seq 4 --set-header Admit-Weight=2 --set-header admit-weight=3", "error: header admit-weight is named twice (as Admit-Weight and admit-weight"},
		{"replay --seq 4 --set-header X-A=1 --drop-header x-a", `error: --drop-header "x-a": deadletter: header edit refused: header x-a is named twice`},
		{"replay --seq 4 --drop-header", "error: --drop-header needs a value"},
		{"replay --seq 4 --drop-header X:Y", `error: header name "X:Y": ':' at byte 1 is not allowed`},
		{"list --set-header Admit-Weight=2", "error: list takes"},
	} {
		a, err := parseDeadArgs(strings.Fields(c.args))
		got := fmt.Sprint(a.cmd, " ", a.code, " ", a.tenant, " ", a.seqs, " ", a.limit, " ", a.scan, " ", a.dryRun)
		if !a.edit.IsZero() {
			got += " " + a.edit.String()
		}
		if err != nil {
			got = "error: " + err.Error()
		}
		if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: %s, want an error saying %q", c.args, got, want)
			}
		} else if got != c.want {
			t.Errorf("%q: %s, want %s", c.args, got, c.want)
		}
	}
}

// FuzzParseDeadArgs: any argument list parses or is refused with a message, and what parses is
// a valid request (a replay selects by sequences or by code/tenant, never both nor neither).
func FuzzParseDeadArgs(f *testing.F) {
	for _, s := range []string{"list --code unknown-tenant", "replay --seq 1 2,3", "replay --tenant a --dry-run", "list --scan=10 --limit=2", "replay --seq=", "list -code x",
		"replay --seq 1 --set-header Admit-Weight=2 --drop-header X-Bad", "replay --code c --set-header=Nats-Msg-Id=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, " ")
		a, err := parseDeadArgs(args)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", s)
			}
			return
		}
		if a.cmd != "list" && a.cmd != "replay" {
			t.Fatalf("%q: command %q", s, a.cmd)
		}
		if a.cmd == "replay" && (len(a.seqs) > 0) == (a.code != "" || a.tenant != "") {
			t.Fatalf("%q: replay of %v and code %q tenant %q", s, a.seqs, a.code, a.tenant)
		}
		if slices.Contains(a.seqs, 0) || a.limit < 0 || a.scan < 0 {
			t.Fatalf("%q: %+v", s, a)
		}
		if err := a.edit.Validate(); err != nil || a.cmd == "list" && !a.edit.IsZero() {
			t.Fatalf("%q: edit %v accepted (%v)", s, a.edit, err)
		}
	})
}
