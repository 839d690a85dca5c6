package registry_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/countersign/countersign/models/registry"
)

// The digest names the registry file exactly: the same bytes give the same
// digest, any edit another.
func TestDigestNamesTheFile(t *testing.T) {
	a, b := registry.Demo(), registry.Demo()
	if a.Digest() != b.Digest() || !strings.HasPrefix(a.Digest(), "sha256:") || len(a.Digest()) != 7+64 {
		t.Fatalf("digests %q, %q", a.Digest(), b.Digest())
	}
	edited, err := registry.Parse(bytes.Replace(registry.DemoYAML(), []byte("policy_version: "), []byte("policy_version:  "), 1))
	if err != nil {
		t.Fatal(err)
	}
	if edited.Digest() == a.Digest() {
		t.Error("an edited file has the same digest")
	}
	if v := a.PolicyVersions(); len(v) != len(a.Tools()) || v["refund_order"] == "" {
		t.Errorf("policy versions %v", v)
	}
}
