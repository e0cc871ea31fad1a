package subjects

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
)

func TestPartitionIsTheServersHash(t *testing.T) {
	// nats-server's {{partition(n,k)}}: FNV-1a 32 of the token, modulo n (subject_transform.go).
	for _, tenant := range []string{"acme", "bob", "t0001", "ünïcode"} {
		h := fnv.New32a()
		h.Write([]byte(tenant))
		if got, want := Partition(tenant, 8), int(h.Sum32()%8); got != want {
			t.Errorf("Partition(%q, 8) = %d, want %d", tenant, got, want)
		}
	}
	if Partition("acme", 1) != 0 || Partition("acme", 0) != 0 {
		t.Error("one partition (or none) is partition 0")
	}
}

func TestPartitionsSubjects(t *testing.T) {
	in := MustParse("jobs.submit.{tenant}.>")
	ps, err := NewPartitions(in, "admitter.JOBS", 8)
	if err != nil {
		t.Fatal(err)
	}
	p := Partition("acme", 8)
	stored, err := ps.Subject("jobs.submit.acme.email.send")
	if err != nil {
		t.Fatal(err)
	}
	if want := ps.Head(p) + "jobs.submit.acme.email.send"; stored != want || !strings.HasPrefix(want, "admitter.JOBS.8.") {
		t.Fatalf("Subject = %q, want %q", stored, want)
	}
	subject, tenant, ok := ps.Published(p, stored)
	if !ok || subject != "jobs.submit.acme.email.send" || tenant != "acme" {
		t.Fatalf("Published(%d, %q) = %q, %q, %v", p, stored, subject, tenant, ok)
	}
	if _, _, ok := ps.Published((p+1)%8, stored); ok {
		t.Fatal("a subject of another partition was taken for this one's")
	}
	if f, _ := ps.TenantFilter(p, "acme"); f != ps.Head(p)+"jobs.submit.acme.>" {
		t.Fatalf("TenantFilter = %q", f)
	}
	if f := ps.Filter(3); f != "admitter.JOBS.8.3.>" {
		t.Fatalf("Filter(3) = %q", f)
	}
	if _, err := ps.Subject("other.acme"); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Subject of a subject outside the template: %v, want ErrNoMatch", err)
	}
}

func TestPartitionsMapping(t *testing.T) {
	for _, c := range []struct{ in, src, dst string }{
		{"jobs.submit.{tenant}.>", "jobs.submit.*.>", "admitter.JOBS.8.{{partition(8,1)}}.jobs.submit.{{wildcard(1)}}.>"},
		{"orders.*.{tenant}.created", "orders.*.*.created", "admitter.JOBS.8.{{partition(8,2)}}.orders.{{wildcard(1)}}.{{wildcard(2)}}.created"},
	} {
		ps, err := NewPartitions(MustParse(c.in), "admitter.JOBS", 8)
		if err != nil {
			t.Fatal(err)
		}
		if src, dst := ps.Mapping(); src != c.src || dst != c.dst {
			t.Errorf("%s: Mapping = %q → %q, want %q → %q", c.in, src, dst, c.src, c.dst)
		}
	}
	one, _ := NewPartitions(MustParse("jobs.submit.{tenant}.>"), "admitter.JOBS", 1)
	if src, dst := one.Mapping(); src != "" || dst != "" || one.Head(0) != "" || one.Filter(0) != "jobs.submit.*.>" {
		t.Errorf("one partition: mapping %q → %q, head %q, filter %q", src, dst, one.Head(0), one.Filter(0))
	}
}

func TestNewPartitionsRefuses(t *testing.T) {
	in := MustParse("jobs.submit.{tenant}.>")
	for _, c := range []struct {
		prefix string
		n      int
	}{{"admitter.JOBS", 0}, {"admitter.JOBS", MaxPartitions + 1}, {"admitter..JOBS", 8}, {"admitter.*", 8}, {"a.{tenant}", 8}, {"a.>", 8}} {
		if _, err := NewPartitions(in, c.prefix, c.n); !errors.Is(err, ErrTemplate) {
			t.Errorf("NewPartitions(%q, %d) = %v, want ErrTemplate", c.prefix, c.n, err)
		}
	}
}

func FuzzPartitionsPublished(f *testing.F) {
	f.Add("acme", "email.send", 8)
	f.Add("t", "x", 3)
	in := MustParse("jobs.submit.{tenant}.>")
	f.Fuzz(func(t *testing.T, tenant, rest string, n int) {
		n = 1 + (n%MaxPartitions+MaxPartitions)%MaxPartitions
		ps, err := NewPartitions(in, "admitter.JOBS", n)
		if err != nil {
			t.Fatal(err)
		}
		subject := "jobs.submit." + tenant + "." + rest
		stored, err := ps.Subject(subject)
		tenant, ok := in.Match(subject)
		if !ok {
			if err == nil {
				t.Fatalf("Subject(%q) = %q for a subject outside the template", subject, stored)
			}
			return
		}
		if err != nil {
			t.Fatalf("Subject(%q): %v", subject, err)
		}
		p := Partition(tenant, n)
		got, gotTenant, ok := ps.Published(p, stored)
		if !ok || got != subject || gotTenant != tenant {
			t.Fatalf("Published(%d, %q) = %q, %q, %v; want %q, %q", p, stored, got, gotTenant, ok, subject, tenant)
		}
		for q := range min(n, 4) {
			if q != p {
				if _, _, ok := ps.Published(q, stored); ok {
					t.Fatalf("%q read as partition %d's, it is %d's", stored, q, p)
				}
			}
		}
	})
}

// TestTenantsSpreadOverPartitions: tenants named alike (t000 to t999) spread over 8 partitions,
// each within a third of its share.
func TestTenantsSpreadOverPartitions(t *testing.T) {
	got := make([]int, 8)
	for i := range 1000 {
		got[Partition(fmt.Sprintf("t%03d", i), 8)]++
	}
	for p, n := range got {
		if n < 1000/8*2/3 || n > 1000/8*4/3 {
			t.Errorf("partition %d has %d of 1000 tenants, want about 125", p, n)
		}
	}
}
