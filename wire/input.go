package wire

import (
	"strconv"
	"strings"
)

// The input's streams. With one partition the input is one stream, named as configured (JOBS);
// with N partitions it is N streams named <in>_<N>_<p>, p from 0 to N−1, each holding the jobs of
// the tenants whose partition is p (see subjects.Partitions). A job's id (its lease, its mark in
// the limiter) is its stream's sequence plus a multiple of JobSpan that names the stream
// (StreamSpan): no two jobs' ids collide, whichever streams they went through as the
// partitions changed (a pool's leases are the jobs of every partition).

// JobSpan is the span of ids of one stream (bucket.JobSpan, lua.JobSpan).
const JobSpan = 1 << 40

// MaxPartitions bounds N so that every job id stays exact in the scripts' Lua numbers (below
// 2^53): StreamSpan(N, N−1) × JobSpan + JobSpan ≤ 2^53 for N ≤ 127; 64 is a round bound.
const MaxPartitions = 64

// StreamSpan is the multiple of JobSpan that names partition p of n: 0 for the configured
// stream (n = 1), then n(n−1)/2 + p, one for each (n, p) of every n up to MaxPartitions.
func StreamSpan(n, p int) int64 {
	if n < 2 {
		return 0
	}
	return int64(n)*int64(n-1)/2 + int64(p)
}

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
	if err1 != nil || err2 != nil || n < 2 || n > MaxPartitions || p < 0 || p >= n || strconv.Itoa(n) != ns || strconv.Itoa(p) != ps {
		return 0, 0, false
	}
	return n, p, true
}

// JobID is the id of the job at sequence seq of partition p of n (0 when it does not fit: a
// sequence of 2^40 or more).
func JobID(n, p int, seq uint64) int64 {
	if seq >= JobSpan || seq == 0 {
		return 0
	}
	return StreamSpan(n, p)*JobSpan + int64(seq)
}
