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
	if JobID(1, 7) != 7 || JobID(8, 7) != 8*JobSpan+7 || JobID(8, 0) != 0 || JobID(8, JobSpan) != 0 {
		t.Fatal("JobID")
	}
}

func TestParseLeaseOfAPartition(t *testing.T) {
	h := nats.Header{}
	h.Set(nats.MsgIdHdr, MsgID(KindForward, "JOBS_8_3", 12))
	if n, err := ParseLease(h, "JOBS"); err != nil || n != 8*JobSpan+12 {
		t.Fatalf("ParseLease of a forward of JOBS_8_3 = %d, %v; want %d", n, err, 8*JobSpan+12)
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
