// A handler that tries to fill in step-up evidence itself. It must not
// compile: writes.Evidence has no exported field.
package main

import (
	"fmt"

	"github.com/countersign/countersign/models/writes"
)

func main() {
	ev := writes.Evidence{userID: "usr_mallory", signIn: []string{"pwd", "webauthn"}}
	fmt.Println(ev.SteppedUp())
}
