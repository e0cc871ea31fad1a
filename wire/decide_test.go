package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseDecideRequestValid(t *testing.T) {
	for _, tc := range []struct {
		body string
		want DecideRequest
	}{
		{`{"tenant": "acme"}`, DecideRequest{Tenant: "acme", Weight: 1}},
		{`{"tenant": "acme", "weight": 2}`, DecideRequest{Tenant: "acme", Weight: 2}},
		{` {"weight":1099511627776,"tenant":"a"} `, DecideRequest{Tenant: "a", Weight: 1 << 40}},
		{`{"tenant": "acme", "weight": null, "key": null, "reserve": null}`, DecideRequest{Tenant: "acme", Weight: 1}},
		{`{"tenant": "acme", "reserve": false}`, DecideRequest{Tenant: "acme", Weight: 1}},
		{`{"tenant": "acme", "weight": 3, "key": "order-1", "reserve": true}`, DecideRequest{Tenant: "acme", Weight: 3, Key: "order-1", Reserve: true}},
		{`{"tenant": "zoë \u00e9", "key": "` + strings.Repeat("k", MaxKeyBytes) + `", "reserve": true}`, DecideRequest{Tenant: "zoë é", Weight: 1, Key: strings.Repeat("k", MaxKeyBytes), Reserve: true}},
		{"{\"tenant\":\"a{b\"}\n", DecideRequest{Tenant: "a{b", Weight: 1}}, // the policy refuses it, with its own code
	} {
		got, err := ParseDecideRequest([]byte(tc.body))
		if err != nil || got != tc.want {
			t.Errorf("ParseDecideRequest(%s) = %+v, %v; want %+v", tc.body, got, err, tc.want)
		}
	}
}

func TestParseDecideRequestInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		code       Code
		detail     []string // each must appear in the detail
	}{
		{"empty", ``, CodeInvalidRequest, []string{"empty", "JSON object"}},
		{"blank", " \n\t", CodeInvalidRequest, []string{"empty"}},
		{"not JSON", `tenant=acme`, CodeInvalidRequest, []string{"malformed JSON at byte"}},
		{"an array", `[{"tenant": "acme"}]`, CodeInvalidRequest, []string{"an array", "want a JSON object"}},
		{"a string", `"acme"`, CodeInvalidRequest, []string{`the string "acme"`}},
		{"a number", `12`, CodeInvalidRequest, []string{"the number 12"}},
		{"null", `null`, CodeInvalidRequest, []string{"null", "want a JSON object"}},
		{"truncated", `{"tenant": "acme"`, CodeInvalidRequest, []string{"malformed JSON", "ends"}},
		{"truncated value", `{"tenant": `, CodeInvalidRequest, []string{"malformed JSON"}},
		{"trailing comma", `{"tenant": "acme",}`, CodeInvalidRequest, []string{"malformed JSON at byte"}},
		{"two objects", `{"tenant": "acme"} {"tenant": "bob"}`, CodeInvalidRequest, []string{"after the JSON object"}},
		{"trailing garbage", `{"tenant": "acme"} x`, CodeInvalidRequest, []string{"malformed JSON"}},
		{"missing tenant", `{"weight": 2}`, CodeInvalidRequest, []string{"tenant is missing"}},
		{"empty object", `{}`, CodeInvalidRequest, []string{"tenant is missing"}},
		{"empty tenant", `{"tenant": ""}`, CodeInvalidRequest, []string{"tenant is empty"}},
		{"null tenant", `{"tenant": null}`, CodeInvalidRequest, []string{"tenant is null"}},
		{"numeric tenant", `{"tenant": 7}`, CodeInvalidRequest, []string{"tenant is the number 7"}},
		{"object tenant", `{"tenant": {"id": 1}}`, CodeInvalidRequest, []string{"tenant is an object"}},
		{"unknown field", `{"tenant": "acme", "tenent": "x"}`, CodeInvalidRequest, []string{`unknown field "tenent"`, "tenant, weight, key and reserve"}},
		{"field in another case", `{"Tenant": "acme"}`, CodeInvalidRequest, []string{`unknown field "Tenant"`}},
		{"duplicate field", `{"tenant": "acme", "tenant": "bob"}`, CodeInvalidRequest, []string{"tenant appears twice"}},
		{"duplicate weight", `{"tenant": "acme", "weight": 1, "weight": 2}`, CodeInvalidRequest, []string{"weight appears twice"}},
		{"weight zero", `{"tenant": "acme", "weight": 0}`, CodeInvalidWeight, []string{"weight is 0", "from 1 to 1099511627776"}},
		{"weight negative", `{"tenant": "acme", "weight": -1}`, CodeInvalidWeight, []string{"weight is -1"}},
		{"weight fraction", `{"tenant": "acme", "weight": 1.5}`, CodeInvalidWeight, []string{"weight is 1.5"}},
		{"weight 2.0", `{"tenant": "acme", "weight": 2.0}`, CodeInvalidWeight, []string{"weight is 2.0"}},
		{"weight exponent", `{"tenant": "acme", "weight": 1e3}`, CodeInvalidWeight, []string{"weight is 1e3"}},
		{"weight over 2^40", `{"tenant": "acme", "weight": 1099511627777}`, CodeInvalidWeight, []string{"1099511627777"}},
		{"weight overflow", `{"tenant": "acme", "weight": 99999999999999999999}`, CodeInvalidWeight, []string{"99999999999999999999"}},
		{"weight string", `{"tenant": "acme", "weight": "2"}`, CodeInvalidWeight, []string{`weight is the string "2"`}},
		{"weight bool", `{"tenant": "acme", "weight": true}`, CodeInvalidWeight, []string{"weight is true"}},
		{"weight array", `{"tenant": "acme", "weight": [2]}`, CodeInvalidWeight, []string{"weight is an array"}},
		{"key number", `{"tenant": "acme", "key": 5, "reserve": true}`, CodeInvalidRequest, []string{"key is the number 5"}},
		{"key empty", `{"tenant": "acme", "key": "", "reserve": true}`, CodeInvalidRequest, []string{"key has 0 bytes", "1 to 256"}},
		{"key too long", `{"tenant": "acme", "key": "` + strings.Repeat("k", MaxKeyBytes+1) + `", "reserve": true}`, CodeInvalidRequest, []string{"key has 257 bytes"}},
		{"reserve string", `{"tenant": "acme", "key": "k", "reserve": "yes"}`, CodeInvalidRequest, []string{`reserve is the string "yes"`, "true or false"}},
		{"reserve without key", `{"tenant": "acme", "reserve": true}`, CodeInvalidRequest, []string{"reserve is true without a key"}},
		{"key without reserve", `{"tenant": "acme", "key": "order-1"}`, CodeInvalidRequest, []string{`key "order-1" without "reserve": true`}},
		{"invalid UTF-8", "{\"tenant\": \"a\xffb\"}", CodeInvalidRequest, []string{"not valid UTF-8"}},
		{"too large", `{"tenant": "` + strings.Repeat("a", MaxRequestBytes) + `"}`, CodeRequestTooLarge, []string{"65550 bytes", "65536"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDecideRequest([]byte(tc.body))
			if err == nil {
				t.Fatalf("ParseDecideRequest(%q) = %+v, nil; want a %s error", tc.body, got, tc.code)
			}
			if got != (DecideRequest{}) {
				t.Errorf("returned %+v with its error, want the zero request", got)
			}
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %T %v is not a *RequestError", err, err)
			}
			if code, _ := CodeOf(err); code != tc.code {
				t.Errorf("code %q, want %q (%v)", code, tc.code, err)
			}
			for _, d := range tc.detail {
				if !strings.Contains(re.Detail, d) {
					t.Errorf("detail %q does not say %q", re.Detail, d)
				}
			}
			if strings.ContainsAny(re.Detail, "\r\n") || len(re.Detail) > 300 {
				t.Errorf("detail %q is not one short line", re.Detail)
			}
		})
	}
}

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[Code]int{
		CodeInvalidRequest: 400, CodeInvalidWeight: 400, CodeInvalidTenant: 400, CodeUnknownTenant: 404, CodeNotFound: 404,
		CodeMethodNotAllowed: 405, CodeRequestTooLarge: 413, CodeWeightOverCapacity: 422, CodeLimiterUnavailable: 503,
		CodeForwardRejected: 500, "something-new": 500,
	} {
		if got := HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%q) = %d, want %d", code, got, want)
		}
	}
	if HTTPStatus(CodeWeightOverCapacity) != http.StatusUnprocessableEntity {
		t.Error("422 is Unprocessable Entity")
	}
}

func TestSecondsAndMillis(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Second: 1, 0: 1, time.Microsecond: 1, 999 * time.Millisecond: 1, time.Second: 1,
		time.Second + time.Nanosecond: 2, 2500 * time.Millisecond: 3, time.Minute: 60, time.Duration(1<<63 - 1): 9223372037,
	} {
		if got := Seconds(d); got != want {
			t.Errorf("Seconds(%v) = %d, want %d", d, got, want)
		}
	}
	for d, want := range map[time.Duration]int64{
		-time.Second: 0, 0: 0, time.Nanosecond: 1, time.Millisecond: 1, time.Millisecond + 1: 2, 1500 * time.Microsecond: 2, time.Second: 1000,
	} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestRateLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		// {5, 2/s}: 5 tokens refill from empty in 2.5 s, rounded up.
		{RateLimitPolicy("0", 5, 2500*time.Millisecond), `"0";q=5;w=3`},
		{RateLimitPolicy("burst", 20, 2*time.Second), `"burst";q=20;w=2`},
		{RateLimitPolicy("daily", 100000, 24*time.Hour), `"daily";q=100000;w=86400`},
		{RateLimitPolicy("monthly", 100000, 30*24*time.Hour), `"monthly";q=100000;w=2592000`},
		{RateLimitPolicy("tiny", 1, time.Microsecond), `"tiny";q=1;w=1`},
		{RateLimitPolicy(`a"b\c`, 1, time.Second), `"a\"b\\c";q=1;w=1`},
		{RateLimit("burst", 3, 1200*time.Millisecond), `"burst";r=3;t=2`},
		{RateLimit("burst", 0, 400*time.Millisecond), `"burst";r=0;t=1`},
		{RateLimit("burst", 5, 0), `"burst";r=5;t=0`},
		{RateLimit("burst", -2, time.Second), `"burst";r=0;t=1`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		label string
		index int
		want  string
	}{
		{"burst", 0, "burst"}, {"0", 0, "0"}, {"a b~", 1, "a b~"}, {"zoë", 2, "2"}, {"tab\there", 3, "3"}, {"", 4, ""},
	} {
		if got := RateLimitName(tc.label, tc.index); got != tc.want {
			t.Errorf("RateLimitName(%q, %d) = %q, want %q", tc.label, tc.index, got, tc.want)
		}
	}
}

// FuzzParseDecideRequest: the decoder never panics; what it refuses it refuses with a code of
// its own and one line of detail, and never calls JSON that encoding/json finds valid
// malformed; what it accepts is valid, agrees with encoding/json, and survives a round trip. Seeds live in testdata/fuzz/FuzzParseDecideRequest/.
func FuzzParseDecideRequest(f *testing.F) {
	for _, s := range []string{
		`{"tenant": "acme"}`, `{"tenant": "acme", "weight": 2, "key": "k", "reserve": true}`, `{"tenant": "a", "weight": 0}`,
		`{"tenant": "a", "tenant": "b"}`, `[]`, ``, `{"tenant": "a"} 1`, `{"tenant": null}`, `{"Tenant": "a"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseDecideRequest(body)
		if err != nil {
			code, ok := CodeOf(err)
			if !ok || (code != CodeInvalidRequest && code != CodeInvalidWeight && code != CodeRequestTooLarge) {
				t.Fatalf("ParseDecideRequest(%q): error %v has code %q", body, err, code)
			}
			var re *RequestError
			if !errors.As(err, &re) || re.Detail == "" || strings.ContainsAny(re.Detail, "\r\n") {
				t.Fatalf("ParseDecideRequest(%q): detail of %v is not one line", body, err)
			}
			if req != (DecideRequest{}) {
				t.Fatalf("ParseDecideRequest(%q) = %+v with error %v", body, req, err)
			}
			if json.Valid(body) && strings.Contains(re.Detail, "malformed JSON") {
				t.Fatalf("ParseDecideRequest(%q) calls valid JSON malformed: %v", body, err)
			}
			return
		}
		if req.Tenant == "" || req.Weight < 1 || req.Weight > MaxWeight || len(req.Key) > MaxKeyBytes || req.Reserve != (req.Key != "") {
			t.Fatalf("ParseDecideRequest(%q) accepted an invalid request %+v", body, req)
		}
		// encoding/json, strict, reads the same values.
		var std struct {
			Tenant  *string
			Weight  *int64
			Key     *string
			Reserve *bool
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("ParseDecideRequest(%q) accepted what encoding/json refuses: %v", body, err)
		}
		if std.Tenant == nil || *std.Tenant != req.Tenant || (std.Weight != nil && *std.Weight != req.Weight) ||
			(std.Weight == nil && req.Weight != 1) || (std.Key != nil && *std.Key != req.Key) || (std.Reserve != nil && *std.Reserve != req.Reserve) {
			t.Fatalf("ParseDecideRequest(%q) = %+v, encoding/json reads %+v", body, req, std)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseDecideRequest(again); err != nil || back != req {
			t.Fatalf("round trip of %+v through %s: %+v, %v", req, again, back, err)
		}
	})
}

// FuzzAppendJSONString: the answers' hand-written JSON strings are encoding/json's.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "acme", `a"b\c`, "tab\there\n", "\x00\x1f\x7f", "zoë", "\u2028\u2029", "\xff\xfe", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := string(appendJSONString(nil, s)); got != strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json writes %s", s, got, want.String())
		}
	})
}

// TestAnswerJSON: the bodies decode back to what was written, the optional fields absent when
// false or zero.
func TestAnswerJSON(t *testing.T) {
	for _, d := range []Decision{{}, {Allowed: true, Tenant: "a\"cme", Plan: "gold", Limit: "0", Remaining: 12, WaitMs: 0},
		{Tenant: "zoë\n", Plan: "p", Limit: "burst", WaitMs: 1500, Reserved: true}, {Allowed: true, Degraded: true, Remaining: -1},
		{Allowed: true, Tenant: "t", Plan: "trial", Shadow: ShadowValue(1500 * time.Microsecond)}, {Allowed: true, Shadow: ShadowValue(0)}} {
		b := d.AppendJSON(nil)
		var back Decision
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&back); err != nil || back != d {
			t.Errorf("%s: %+v, %v; want %+v", b, back, err, d)
		}
		if bytes.Contains(b, []byte("reserved")) != d.Reserved || bytes.Contains(b, []byte("degraded")) != d.Degraded || bytes.Contains(b, []byte("shadow")) != (d.Shadow != "") {
			t.Errorf("%s: optional fields for %+v", b, d)
		}
	}
	for _, e := range []ErrorBody{{Error: CodeInvalidRequest, Detail: `field "x"`}, {Error: CodeLimiterUnavailable, Detail: "down", WaitMs: 250}} {
		b, err := json.Marshal(e)
		var back ErrorBody
		if err != nil || json.Unmarshal(b, &back) != nil || back != e || bytes.Contains(b, []byte("wait_ms")) != (e.WaitMs != 0) {
			t.Errorf("%s: %+v, %v; want %+v", b, back, err, e)
		}
	}
}

func TestShadowValue(t *testing.T) {
	for wait, want := range map[time.Duration]string{0: "admitted", -time.Second: "admitted", time.Microsecond: "delayed 1", 1500 * time.Millisecond: "delayed 1500"} {
		if got := ShadowValue(wait); got != want {
			t.Errorf("ShadowValue(%v) = %q, want %q", wait, got, want)
		}
	}
}
