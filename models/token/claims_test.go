package token_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/token"
)

// generalDecode is decodeClaims as it was before its single walk: every
// payload parsed into its members (names decoded), then into the claims.
// The single walk must refuse and accept exactly what it does.
func generalDecode(payload []byte) (models.Claims, error) {
	if !utf8.Valid(payload) {
		return models.Claims{}, errors.New("payload is not valid UTF-8")
	}
	fields, err := token.ObjectFields(payload)
	if err != nil {
		return models.Claims{}, err
	}
	for name := range fields {
		for _, known := range token.ClaimNames {
			if name != known && strings.EqualFold(name, known) {
				return models.Claims{}, errors.New("case")
			}
		}
	}
	var c models.Claims
	err = json.Unmarshal(payload, &c)
	return c, err
}

// claimsPayload is the payload of a token as Sign writes it.
const claimsPayload = `{"iss":"countersign","aud":"countersign-execute","sub":"ag_1","tenant":"tn_1","jti":"tk_1",` +
	`"op":"refund_order","resource":"ord_1","args_digest":"sha256:ab","policy":"p1","request_key":"rk",` +
	`"proposal_id":"pr_1","approvers":["us_1"],"amr":["pwd"],"iat":1700000000,"exp":1700000300}`

var claimsCases = []string{
	claimsPayload,
	`{}`,
	` {"jti":"a"} `,
	`{"aud":"a","aud":"b"}`,
	`{"jti":"a","iss":"x","jti":"a"}`,
	`{"aud":"a","\u0061ud":"b"}`,
	`{"\u0061ud":"a","aud":"b"}`,
	`{"\u0041UD":"x"}`,
	`{"AUD":"x"}`,
	`{"Jti":"x","jti":"y"}`,
	`{"x\u0041":1,"jti":"a"}`,
	`{"jtí":"x"}`,
	`{"jti":"a","nested":{"jti":"b","jti":"c"}}`,
	`{"approvers":[{"a":1,"a":2}]}`,
	`{"jti":"a"} {"jti":"b"}`,
	`{"jti":"a"}x`,
	`{"jti":}`,
	`{"jti":"a"`,
	`{"jti":"a\"}`,
	`{"jti":"a\\"}`,
	`{"jt\"i":"a"}`,
	`{"iat":"1700000000"}`,
	`{"exp":null}`,
	`null`,
	`[]`,
	`[{"jti":"a"}]`,
	`"jti"`,
	``,
	` `,
	"{\"jti\":\"\xff\"}",
	"{\"j\xffti\":\"a\"}",
	`{"jti":"a",}`,
	`{,"jti":"a"}`,
	`{"jti" "a"}`,
	`{"jti":"a" "iss":"b"}`,
	`{"a":[}`,
	`{"a":{"b":[1,2,{"c":3}]},"jti":"x"}`,
	"{\"jti\":\"a\"}\x00",
	"\ufeff{\"jti\":\"a\"}",
}

// The single walk decides every payload as the general parse does: the
// same refusals, the same claims.
func TestDecodeClaimsAgreesWithTheGeneralParse(t *testing.T) {
	check := func(payload string) {
		t.Helper()
		got, gotErr := token.DecodeClaims([]byte(payload))
		want, wantErr := generalDecode([]byte(payload))
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: decodeClaims err=%v, the general parse err=%v", payload, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeClaims %+v, the general parse %+v", payload, got, want)
		}
	}
	for _, p := range claimsCases {
		check(p)
	}
	// Mutations of a real payload: a byte changed, dropped, doubled, or a
	// member repeated (spelled plainly, with an escape or in another case).
	rng := rand.New(rand.NewPCG(14, 1))
	alphabet := []byte(`{}[]":,\ u0041aJ1 ` + "\xff")
	for range 20000 {
		b := []byte(claimsPayload)
		switch i := rng.IntN(len(b)); rng.IntN(5) {
		case 0:
			b[i] = alphabet[rng.IntN(len(alphabet))]
		case 1:
			b = append(b[:i:i], b[i+1:]...)
		case 2:
			b = append(b[:i+1:i+1], b[i:]...)
		case 3:
			b = append([]byte(`{"`+[]string{"jti", "j\\u0074i", "JTI", "other"}[rng.IntN(4)]+`":"x",`), b[1:]...)
		case 4:
			b = append(b[:len(b)-1:len(b)-1], []byte(`,"`+[]string{"aud", "\\u0061ud", "Aud", "nested"}[rng.IntN(4)]+`":"y"}`)...)
		}
		check(string(b))
	}
}

func FuzzDecodeClaims(f *testing.F) {
	for _, p := range claimsCases {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, gotErr := token.DecodeClaims(payload)
		want, wantErr := generalDecode(payload)
		if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeClaims %+v %v, the general parse %+v %v", payload, got, gotErr, want, wantErr)
		}
	})
}

// BenchmarkDecodeClaims decodes the payload of a token as Sign writes it
// with the single walk and with the general parse, alternately, and reports
// the walk's time as a fraction of the general parse's (x-general).
//
//	go test -run '^$' -bench DecodeClaims ./models/token/
func BenchmarkDecodeClaims(b *testing.B) {
	payload := []byte(claimsPayload)
	var walk, general time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := token.DecodeClaims(payload); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := generalDecode(payload); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		walk += t1.Sub(t0)
		general += t2.Sub(t1)
	}
	b.ReportMetric(float64(walk)/float64(b.N), "walk-ns/op")
	b.ReportMetric(float64(general)/float64(b.N), "general-ns/op")
	b.ReportMetric(float64(walk)/float64(general), "x-general")
}
