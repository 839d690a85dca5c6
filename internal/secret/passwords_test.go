package secret

import (
	"regexp"
	"testing"
	"time"
)

// cheap are the costs tests use for new hashes, set the way production
// sets its own: through PasswordParams.
var cheap = PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}

func TestPasswordsHashWithConfiguredCosts(t *testing.T) {
	h, err := NewPasswords(cheap, 1)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := h.Hash("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\$argon2id\$v=19\$m=64,t=1,p=1\$`).MatchString(enc) {
		t.Errorf("Hash = %q, want the configured m=64,t=1,p=1", enc)
	}
	if !h.Verify(enc, "correct horse battery") || h.Verify(enc, "correct horse batterY") {
		t.Error("Verify does not tell the right password from a wrong one")
	}
	// A hash made with other costs still verifies: stored hashes carry
	// their own parameters.
	if !h.Verify(mustHash(t, "another password"), "another password") {
		t.Error("a default-cost hash does not verify under cheap costs")
	}
}

func mustHash(t *testing.T, pw string) string {
	t.Helper()
	enc, err := HashPassword(pw)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

func TestPasswordParamsText(t *testing.T) {
	var p PasswordParams
	if err := p.UnmarshalText([]byte("m=65536,t=2,p=2")); err != nil || p != DefaultPasswordParams {
		t.Errorf("UnmarshalText(default) = %+v, %v", p, err)
	}
	if got := DefaultPasswordParams.String(); got != "m=65536,t=2,p=2" {
		t.Errorf("String = %q", got)
	}
	for _, bad := range []string{"", "m=64,t=1", "m=64,t=1,p=1,x=1", "m=4,t=1,p=1", "m=64,t=0,p=1",
		"m=64,t=1,p=0", "m=064,t=1,p=1", "t=1,m=64,p=1", "m=64,t=65,p=1", "m=4194304,t=1,p=1"} {
		q := cheap
		if err := q.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) accepted %+v", bad, q)
		} else if q != cheap {
			t.Errorf("UnmarshalText(%q) failed but changed the value to %+v", bad, q)
		}
	}
	if _, err := NewPasswords(PasswordParams{MemoryKiB: 8, Time: 1, Threads: 2}, 1); err == nil {
		t.Error("NewPasswords accepted less than 8 KiB per thread")
	}
}

// TestPasswordsBoundConcurrency holds every slot and checks that a hash
// waits for one: the bound is what keeps a burst of sign-ins from taking
// 64 MiB each at once.
func TestPasswordsBoundConcurrency(t *testing.T) {
	h, err := NewPasswords(cheap, 2)
	if err != nil {
		t.Fatal(err)
	}
	h.slots <- struct{}{}
	h.slots <- struct{}{}
	done := make(chan bool)
	go func() {
		_, err := h.Hash("correct horse battery")
		done <- err == nil
	}()
	select {
	case <-done:
		t.Fatal("a hash ran while every slot was taken")
	case <-time.After(100 * time.Millisecond):
	}
	<-h.slots
	if ok := <-done; !ok {
		t.Error("the hash failed once a slot was free")
	}
	<-h.slots
	if len(h.slots) != 0 {
		t.Errorf("%d slots still taken after every hash ended", len(h.slots))
	}
}
