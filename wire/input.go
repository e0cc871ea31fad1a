package wire

import (
	"strconv"
	"strings"
)

// The input's streams. With one partition the input is one stream, named as configured (JOBS);
// with N partitions it is N streams named <in>_<N>_<p>, p from 0 to N−1, each holding the jobs of
// the tenants whose partition is p (see subjects.Partitions). A job's id (its lease, its mark in
// the limiter) is its stream's sequence plus N × JobSpan: the ids of one tenant's jobs never
// collide, whichever streams they went through as the partitions changed.

// JobSpan is the span of ids of one partitioning (bucket.JobSpan, lua.JobSpan).
const JobSpan = 1 << 40

// InputStream is the name of partition p of n of input stream in.
func InputStream(in string, n, p int) string {
	if n < 2 {
		return in
	}
	return in + "_" + strconv.Itoa(n) + "_" + strconv.Itoa(p)
}

// ParseInputStream reads a stream name InputStream gives for in: its partitioning n (1 for in
// itself) and partition p; ok is false for another name.
func ParseInputStream(in, stream string) (n, p int, ok bool) {
	if stream == in {
		return 1, 0, true
	}
	rest, found := strings.CutPrefix(stream, in+"_")
	if !found {
		return 0, 0, false
	}
	ns, ps, found := strings.Cut(rest, "_")
	if !found {
		return 0, 0, false
	}
	n, err1 := strconv.Atoi(ns)
	p, err2 := strconv.Atoi(ps)
	if err1 != nil || err2 != nil || n < 2 || n >= 1<<12 || p < 0 || p >= n || strconv.Itoa(n) != ns || strconv.Itoa(p) != ps {
		return 0, 0, false
	}
	return n, p, true
}

// JobID is the id of the job at sequence seq of a stream of partitioning n (0 when it does not
// fit: a sequence of 2^40 or more).
func JobID(n int, seq uint64) int64 {
	if seq >= JobSpan || seq == 0 {
		return 0
	}
	if n < 2 {
		return int64(seq)
	}
	return int64(n)*JobSpan + int64(seq)
}
