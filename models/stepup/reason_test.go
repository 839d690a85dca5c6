package stepup

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-webauthn/webauthn/protocol"
)

func TestLibraryReasonKeepsDeveloperDetailsOut(t *testing.T) {
	pe := &protocol.Error{Type: "verification_error", Details: "Error validating origin",
		DevInfo: "Expected Values: [http://internal.example:9999], Received: http://evil.example"}
	got := libraryReason(fmt.Errorf("wrapped: %w", pe))
	if got != "Error validating origin" {
		t.Errorf("reason = %q", got)
	}
	if strings.Contains(got, "internal.example") {
		t.Error("developer info reached the user")
	}
	if got := libraryReason(errors.New("pq: connection refused at 10.0.0.3")); got != "verification failed" {
		t.Errorf("a foreign error's text reached the user: %q", got)
	}
	if got := libraryReason(&protocol.Error{Type: "invalid_request"}); got != "invalid_request" {
		t.Errorf("type fallback = %q", got)
	}
}
