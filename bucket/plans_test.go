package bucket

import (
	"errors"
	"testing"
	"time"
)

func TestNewPlans(t *testing.T) {
	free := mustPlan(t, "free", lim("", 5, 500*ms))
	gold := mustPlan(t, "gold", lim("burst", 20, 100*ms))
	p, err := NewPlans([]*Plan{gold, free}, map[string]string{"acme": "gold"}, "free")
	if err != nil {
		t.Fatal(err)
	}
	if pl, _ := p.Lookup("acme"); pl != gold {
		t.Errorf("acme's plan %v, want gold", pl)
	}
	if pl, _ := p.Lookup("bob"); pl != free {
		t.Errorf("bob's plan %v, want the default free", pl)
	}
	for _, tc := range []struct {
		name    string
		plans   []*Plan
		tenants map[string]string
		def     string
		is      error
	}{
		{"no plans", nil, nil, "", nil},
		{"nil plan", []*Plan{nil}, nil, "", nil},
		{"unnamed plan", []*Plan{mustPlan(t, "", lim("", 1, time.Second))}, nil, "", nil},
		{"two plans of one name", []*Plan{free, free}, nil, "", nil},
		{"tenant of a missing plan", []*Plan{free}, map[string]string{"acme": "gold"}, "", nil},
		{"tenant with braces", []*Plan{free}, map[string]string{"a{b}": "free"}, "", ErrInvalidTenant},
		{"missing default", []*Plan{free}, nil, "gold", nil},
	} {
		_, err := NewPlans(tc.plans, tc.tenants, tc.def)
		if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: err = %v, want an error (%v)", tc.name, err, tc.is)
		}
	}
}

func TestNewPlanLimitError(t *testing.T) {
	_, err := NewPlan("gold", lim("burst", 5, time.Second), lim("daily", 0, time.Second))
	var le *LimitError
	if !errors.As(err, &le) || le.Plan != "gold" || le.Index != 1 || le.Label != "daily" {
		t.Fatalf("err = %#v, want a LimitError for gold limit 1 (daily)", err)
	}
	if want := `bucket: plan "gold" limit daily: capacity must be ≥ 1, got 0`; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}
