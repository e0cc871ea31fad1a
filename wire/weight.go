package wire

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// MaxWeight bounds Admit-Weight so that weight × interval arithmetic cannot overflow.
const MaxWeight = 1 << 40

// ParseWeight reads a job's weight from its headers: absent means 1; otherwise exactly one
// value, a decimal integer from 1 to 2^40 without sign or spaces (leading zeros allowed). The
// header name is matched without regard to case (NATS keeps header case as the producer wrote
// it). The error is a sentence naming the header and the value.
func ParseWeight(h nats.Header) (int64, error) {
	var vals []string
	for k, v := range h {
		if strings.EqualFold(k, HeaderWeight) {
			vals = append(vals, v...)
		}
	}
	switch len(vals) {
	case 0:
		return 1, nil
	case 1:
	default:
		return 0, fmt.Errorf("header %s appears %d times (%q), want one value", HeaderWeight, len(vals), vals)
	}
	v := vals[0]
	bad := func() (int64, error) {
		return 0, fmt.Errorf("header %s is %q, want an integer from 1 to %d", HeaderWeight, v, int64(MaxWeight))
	}
	if v == "" {
		return bad()
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return bad()
		}
	}
	w, err := strconv.ParseInt(v, 10, 64)
	if err != nil || w < 1 || w > MaxWeight {
		return bad()
	}
	return w, nil
}
