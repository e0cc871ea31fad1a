package wire

import (
	"testing"

	"github.com/nats-io/nats.go"
)

func TestInputStreams(t *testing.T) {
	if InputStream("JOBS", 1, 0) != "JOBS" || InputStream("JOBS", 8, 3) != "JOBS_8_3" {
		t.Fatalf("InputStream: %q, %q", InputStream("JOBS", 1, 0), InputStream("JOBS", 8, 3))
	}
	for _, c := range []struct {
		stream string
		n, p   int
		ok     bool
	}{{"JOBS", 1, 0, true}, {"JOBS_8_3", 8, 3, true}, {"JOBS_8_8", 0, 0, false}, {"JOBS_1_0", 0, 0, false}, {"JOBS_08_3", 0, 0, false},
		{"JOBS_8", 0, 0, false}, {"JOBSX", 0, 0, false}, {"JOBS_8_-1", 0, 0, false}, {"OTHER_8_3", 0, 0, false}} {
		n, p, ok := ParseInputStream("JOBS", c.stream)
		if n != c.n || p != c.p || ok != c.ok {
			t.Errorf("ParseInputStream(%q) = %d, %d, %v; want %d, %d, %v", c.stream, n, p, ok, c.n, c.p, c.ok)
		}
	}
	if JobID(1, 0, 7) != 7 || JobID(8, 0, 7) != 28*JobSpan+7 || JobID(8, 0, 0) != 0 || JobID(8, 3, JobSpan) != 0 {
		t.Fatal("JobID")
	}
}

func TestParseLeaseOfAPartition(t *testing.T) {
	h := nats.Header{}
	h.Set(nats.MsgIdHdr, MsgID(KindForward, "JOBS_8_3", 12))
	if n, err := ParseLease(h, "JOBS"); err != nil || n != JobID(8, 3, 12) {
		t.Fatalf("ParseLease of a forward of JOBS_8_3 = %d, %v; want %d", n, err, JobID(8, 3, 12))
	}
	h.Set(nats.MsgIdHdr, MsgID(KindForward, "OTHER_8_3", 12))
	if _, err := ParseLease(h, "JOBS"); err == nil {
		t.Fatal("a forward of another input was read as a lease")
	}
}

func FuzzParseInputStream(f *testing.F) {
	f.Add("JOBS_8_3")
	f.Add("JOBS")
	f.Fuzz(func(t *testing.T, stream string) {
		n, p, ok := ParseInputStream("JOBS", stream)
		if !ok {
			return
		}
		if InputStream("JOBS", n, p) != stream {
			t.Fatalf("ParseInputStream(%q) = %d, %d: InputStream gives %q", stream, n, p, InputStream("JOBS", n, p))
		}
	})
}

// TestJobIDsNeverCollide: the jobs at one sequence of every partition of every count have ids
// of their own, exact in Lua's numbers. Before, the id named the count only: the jobs at
// sequence 7 of JOBS_6_3 and JOBS_6_4 had one id, and a pool (whose leases are every
// partition's jobs) counted two running jobs as one (the soak: 8 running of a pool of 6).
func TestJobIDsNeverCollide(t *testing.T) {
	seen := map[int64]string{}
	for n := 1; n <= MaxPartitions; n++ {
		for p := range n {
			first, last := JobID(n, p, 1), JobID(n, p, JobSpan-1)
			if last > MaxLease || first < 1 {
				t.Fatalf("partition %d of %d: ids %d to %d, want within 1 to 2^53-1", p, n, first, last)
			}
			if other, ok := seen[first]; ok {
				t.Fatalf("partition %d of %d has the ids of %s", p, n, other)
			}
			seen[first] = InputStream("JOBS", n, p)
		}
	}
	if _, _, ok := ParseInputStream("JOBS", InputStream("JOBS", MaxPartitions+1, 0)); ok {
		t.Fatal("a stream of more partitions than MaxPartitions was read as an input")
	}
}
