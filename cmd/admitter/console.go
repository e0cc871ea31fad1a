package main

import (
	"context"
	"log/slog"

	"github.com/admitter/admitter/console"
	"github.com/admitter/admitter/deadletter"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/plansource"
)

// newConsole makes the web console (ADMITTER_CONSOLE), answering "starting" until attached:
// nil when it is off.
func newConsole(c *config, b *boot, log *slog.Logger) (*console.Console, error) {
	if c.Console == "off" {
		return nil, nil
	}
	return console.New(console.Config{ActToken: c.ConsoleToken, ReadToken: c.HTTPToken, Logger: log, Starting: b.Ready})
}

// startShares answers the other replicas' consoles for this replica's activity, on
// _ADMITTER.<ADMITTER_CONSUMER>.activity.<replica>, whether this replica's console is on or off
// (theirs may be on), and asks them for theirs for this replica's console.
func startShares(st *stack, c *config, log *slog.Logger) (*console.Shares, error) {
	return console.StartShares(st.nc, console.SharesConfig{Consumer: c.Consumer, Replica: st.replica, Activity: st.activity, Logger: log})
}

// attachConsole gives the console the running stack: its activity and the other replicas'
// shares, policy and queue, the dead letters, and the state bucket for pauses and moves. What
// cannot be opened is left out (the console says so) rather than stopping the service.
func attachConsole(ctx context.Context, con *console.Console, st *stack, shares *console.Shares, live *livePlans, c *config, log *slog.Logger) {
	if con == nil {
		return
	}
	back := &console.Backend{Activity: st.activity, Policy: st.policy, Queue: st.svc, Shares: shares, PlansReport: live.consoleReport,
		PoolHistory: st.svc.PoolHistory}
	dead, err := deadletter.Open(ctx, deadletter.Config{JetStream: st.js, In: c.in, Dead: c.dead,
		StreamIn: c.StreamIn, StreamDead: c.StreamDead, Replicas: c.StreamReplicas})
	if err != nil {
		log.Warn("console: the dead letters cannot be read or replayed", "err", err)
	} else {
		back.Dead = dead
	}
	if state, err := plansource.LookupState(ctx, st.js, c.Consumer); err != nil {
		log.Warn("console: no pause or move controls: the state bucket cannot be opened", "err", err)
	} else {
		if c.PlansKV != "" {
			if kv, err := plansource.OpenKV(ctx, st.js, c.PlansKV, c.StreamReplicas, plans.Parse, "", nil); err == nil {
				state.WithLegacy(kv)
			}
		}
		back.Plans = state
	}
	con.Attach(back)
	mode := "read-only (ADMITTER_CONSOLE_TOKEN unset)"
	if c.ConsoleToken != "" {
		mode = "actions need ADMITTER_CONSOLE_TOKEN"
	}
	log.Info("console at "+console.Prefix, "mode", mode, "plans_controls", back.Plans != nil)
}
