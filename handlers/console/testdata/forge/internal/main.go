// A handler that tries to make step-up evidence with the constructor the
// step-up service uses. It must not compile: the package is internal to
// models.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/internal/verified"
)

func main() {
	u := models.User{ID: "usr_mallory"}
	ev := verified.StepUp(auth.ApprovalEvidence(u, nil), "prp_1", "sha256:00", json.RawMessage(`{}`))
	fmt.Println(ev.SteppedUp())
}
