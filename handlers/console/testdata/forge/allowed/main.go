// What a handler may do: pass on the sign-in evidence models/auth makes.
// It compiles, which shows that the other two programs fail for their
// forgery alone.
package main

import (
	"fmt"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

func main() {
	u := models.User{ID: "usr_alice"}
	in := writes.ConfirmInput{Reviewer: u, Evidence: auth.ApprovalEvidence(u, nil)}
	fmt.Println(in.Evidence.SteppedUp())
}
