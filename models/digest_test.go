package models

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// vectorDir holds the RFC 8785 reference vectors (see its SOURCE.md). Tests
// run in the package directory, so the path is relative to models/.
const vectorDir = "../testdata/rfc8785"

type vector struct {
	name           string
	input, output  []byte
	outhex         []byte // output as decoded from outhex/NAME.txt
	outhexFilename string
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join(vectorDir, "input", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatalf("no RFC 8785 vectors under %s/input", vectorDir)
	}
	var vs []vector
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		v := vector{name: name, outhexFilename: filepath.Join(vectorDir, "outhex", name+".txt")}
		v.input = readFile(t, in)
		v.output = readFile(t, filepath.Join(vectorDir, "output", name+".json"))
		hexText := readFile(t, v.outhexFilename)
		v.outhex, err = hex.DecodeString(strings.Join(strings.Fields(string(hexText)), ""))
		if err != nil {
			t.Fatalf("%s: %v", v.outhexFilename, err)
		}
		vs = append(vs, v)
	}
	return vs
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func mustDigest(t testing.TB, doc string) string {
	t.Helper()
	d, err := Digest([]byte(doc))
	if err != nil {
		t.Fatalf("Digest(%s): %v", doc, err)
	}
	return d
}

func TestCanonicalRFC8785Vectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.name, func(t *testing.T) {
			if !bytes.Equal(v.output, v.outhex) {
				t.Fatalf("vector files disagree: output/%s.json and %s", v.name, v.outhexFilename)
			}
			got, err := Canonical(v.input)
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if !bytes.Equal(got, v.output) {
				t.Errorf("Canonical:\n got  %q\n want %q", got, v.output)
			}

			d, err := Digest(v.input)
			if err != nil {
				t.Fatalf("Digest: %v", err)
			}
			if want := sha256Digest(v.output); d != want {
				t.Errorf("Digest = %s, want %s", d, want)
			}
			if !strings.HasPrefix(d, DigestPrefix) {
				t.Errorf("Digest = %s, want prefix %s", d, DigestPrefix)
			}

			// The canonical form is its own canonical form.
			again, err := Canonical(v.output)
			if err != nil {
				t.Fatalf("Canonical(output): %v", err)
			}
			if !bytes.Equal(again, v.output) {
				t.Errorf("Canonical(output) = %q, want it unchanged", again)
			}
		})
	}
}

func TestCanonicalStackNotesExample(t *testing.T) {
	got, err := Canonical([]byte(`{"b":1e3,"a":"\u00e9"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"é","b":1000}`; string(got) != want {
		t.Errorf("Canonical = %s, want %s", got, want)
	}
}

func TestDigestSameMeaning(t *testing.T) {
	base := `{"amount":199,"currency":"CNY","note":"é/x","items":[1,2,{"k":true}]}`
	want := mustDigest(t, base)
	for _, variant := range []string{
		// whitespace
		"{ \"amount\" : 199 ,\n\t\"currency\":\"CNY\",\r\n \"note\":\"é/x\", \"items\" : [ 1 , 2 , { \"k\" : true } ] }\n",
		// key order
		`{"items":[1,2,{"k":true}],"note":"é/x","currency":"CNY","amount":199}`,
		// escapes
		`{"amount":199,"currency":"\u0043\u004e\u0059","note":"\u00e9\/x","items":[1,2,{"\u006b":true}]}`,
		// number spellings of the same double
		`{"amount":1.99e2,"currency":"CNY","note":"é/x","items":[1.0,2E0,{"k":true}]}`,
		`{"amount":19900e-2,"currency":"CNY","note":"é/x","items":[10e-1,0.2e1,{"k":true}]}`,
	} {
		if got := mustDigest(t, variant); got != want {
			t.Errorf("Digest(%q) = %s, want %s (same as %s)", variant, got, want, base)
		}
	}
}

func TestDigestDifferentValues(t *testing.T) {
	for _, pair := range [][2]string{
		{`{"amount":199}`, `{"amount":19900}`},
		{`{"currency":"CNY"}`, `{"currency":"cny"}`},
		{`{"amount":199}`, `{"amount":"199"}`},
		{`{"a":null}`, `{}`},
		{`[1,2]`, `[2,1]`},
		{`{"a":{"b":1}}`, `{"a.b":1}`},
		{`{"a":0.1}`, `{"a":0.10000000000000002}`},
	} {
		a, b := mustDigest(t, pair[0]), mustDigest(t, pair[1])
		if a == b {
			t.Errorf("%s and %s have the same digest %s", pair[0], pair[1], a)
		}
	}
}

// TestDigestNumbersAreDoubles pins down an RFC 8785 property the rest of the
// system must respect: numbers are IEEE 754 doubles, so integers beyond 2^53
// that differ only past double precision share a digest. A decoder that keeps
// them exact (json.Number, int64) would see two values where the digest sees
// one, so tool schemas must bound integers to ±(2^53−1) or carry such values
// as strings.
func TestDigestNumbersAreDoubles(t *testing.T) {
	if a, b := mustDigest(t, `[9007199254740993]`), mustDigest(t, `[9007199254740992]`); a != b {
		t.Errorf("2^53+1 and 2^53 have different digests; RFC 8785 maps both to the double 2^53")
	}
	if a, b := mustDigest(t, `[9007199254740991]`), mustDigest(t, `[9007199254740990]`); a == b {
		t.Errorf("integers within double precision share a digest")
	}
}

func TestCanonicalInvalid(t *testing.T) {
	for _, doc := range []string{
		``,
		` `,
		`{`,
		`{"a":1,}`,
		`{"a":1} {"b":2}`,
		`[1 2]`,
		`{a:1}`,
		`'x'`,
		`NaN`,
		`01`,
		`+1`,
		`1e400`,                 // out of range for a double
		`{"a":1,"a":2}`,         // duplicate key
		`{"a":1,"\u0061":2}`,    // duplicate key, spelled differently
		`["\ud800"]`,            // lone surrogate
		"[\"\xff\"]",            // invalid UTF-8
		"\xef\xbb\xbf{\"a\":1}", // byte order mark
	} {
		for name, f := range map[string]func([]byte) error{
			"Canonical": func(b []byte) error { _, err := Canonical(b); return err },
			"Digest":    func(b []byte) error { _, err := Digest(b); return err },
		} {
			err := f([]byte(doc))
			if got, want := ErrorCode(err), EInvalidRequest; got != want {
				t.Errorf("%s(%q): code %q (err %v), want %q", name, doc, got, err, want)
			}
		}
	}
	if _, err := Canonical(nil); ErrorCode(err) != EInvalidRequest {
		t.Errorf("Canonical(nil): err %v, want code %q", err, EInvalidRequest)
	}
}

func TestDigestValue(t *testing.T) {
	type args struct {
		Currency string `json:"currency"`
		Amount   int    `json:"amount"`
	}
	got, err := DigestValue(args{Currency: "CNY", Amount: 199})
	if err != nil {
		t.Fatal(err)
	}
	if want := mustDigest(t, `{"amount":199,"currency":"CNY"}`); got != want {
		t.Errorf("DigestValue = %s, want %s", got, want)
	}
	if _, err := DigestValue(make(chan int)); ErrorCode(err) != EInvalidRequest {
		t.Errorf("DigestValue(chan): err %v, want code %q", err, EInvalidRequest)
	}
}

func TestResourceSet(t *testing.T) {
	set, d, err := ResourceSet([]string{"ord_3", "ord_1", "ord_2", "ord_1", "ord_3"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ord_1", "ord_2", "ord_3"}; !slices.Equal(set, want) {
		t.Errorf("set = %q, want %q", set, want)
	}
	if want := mustDigest(t, `["ord_1","ord_2","ord_3"]`); d != want {
		t.Errorf("digest = %s, want %s", d, want)
	}

	// Every order, with or without duplicates, gives the same set and digest.
	ids := []string{"b", "a", "é", "A", "c10", "c9"}
	_, want, err := ResourceSet(ids)
	if err != nil {
		t.Fatal(err)
	}
	permute(ids, len(ids), func(p []string) {
		_, got, err := ResourceSet(append(slices.Clone(p), p[0]))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("ResourceSet(%q) digest %s, want %s", p, got, want)
		}
	})

	// Another set gives another digest.
	_, other, _ := ResourceSet([]string{"a", "b"})
	_, more, _ := ResourceSet([]string{"a", "b", "c"})
	if other == more {
		t.Errorf("sets {a,b} and {a,b,c} have the same digest")
	}

	// An empty set is the empty array, not null.
	set, d, err = ResourceSet(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 0 || set == nil {
		t.Errorf("ResourceSet(nil) set = %#v, want empty non-nil", set)
	}
	if want := mustDigest(t, `[]`); d != want {
		t.Errorf("ResourceSet(nil) digest = %s, want digest of []", d)
	}
}

// permute calls f with every permutation of a[:k] (Heap's algorithm).
func permute(a []string, k int, f func([]string)) {
	if k <= 1 {
		f(a)
		return
	}
	for i := 0; i < k-1; i++ {
		permute(a, k-1, f)
		if k%2 == 0 {
			a[i], a[k-1] = a[k-1], a[i]
		} else {
			a[0], a[k-1] = a[k-1], a[0]
		}
	}
	permute(a, k-1, f)
}

func FuzzCanonical(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v.input)
		f.Add(v.output)
	}
	for _, s := range []string{
		`{"b":1e3,"a":"\u00e9"}`,
		`{"amount":199,"currency":"CNY"}`,
		`[1e21,1e-7,5e-324,-0,1.7976931348623157e308,0.1,100,1e20]`,
		`{"\u0000":"\u001f\u007f\u2028"}`,
		`"\ud83d\ude02"`,
		`{"a":1,"a":2}`,
		` true `,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, input []byte) {
		out, err := Canonical(input)
		if err != nil {
			if code := ErrorCode(err); code != EInvalidRequest {
				t.Fatalf("Canonical(%q): code %q, want %q", input, code, EInvalidRequest)
			}
			return
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("Canonical(%q) = %q: not valid UTF-8 JSON", input, out)
		}
		again, err := Canonical(out)
		if err != nil {
			t.Fatalf("Canonical(%q) = %q, which Canonical rejects: %v", input, out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: Canonical(%q) = %q, Canonical of that = %q", input, out, again)
		}
		d1, err1 := Digest(input)
		d2, err2 := Digest(out)
		if err1 != nil || err2 != nil || d1 != d2 || d1 != sha256Digest(out) {
			t.Fatalf("Digest(%q) = %s, %v; Digest(%q) = %s, %v; want both %s", input, d1, err1, out, d2, err2, sha256Digest(out))
		}

		// What encoding/json decodes the input to must canonicalize to the
		// same bytes: the digest is what a reviewer approves, the decoded
		// value is what gets executed.
		dec := json.NewDecoder(bytes.NewReader(input))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return
		}
		re, err := json.Marshal(v)
		if err != nil {
			return
		}
		reOut, err := Canonical(re)
		if err != nil {
			t.Fatalf("Canonical accepted %q but not its re-encoding %q: %v", input, re, err)
		}
		if !bytes.Equal(reOut, out) {
			t.Fatalf("decoded value canonicalizes differently:\n input     %q\n canonical %q\n re-encoded %q\n its canonical %q", input, out, re, reOut)
		}
	})
}
