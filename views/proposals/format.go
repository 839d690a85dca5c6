package proposals

import (
	"strconv"

	"github.com/a-h/templ"
)

func itoa(n int) string { return strconv.Itoa(n) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// stepUpAttrs mark the Approve form of a security-key tier for the script,
// with the endpoints of its ceremony.
func stepUpAttrs(p Page) templ.Attributes {
	if p.StepUpBegin == "" || !p.CanApprove {
		return templ.Attributes{}
	}
	return templ.Attributes{"data-webauthn-approve": "", "data-begin": p.StepUpBegin, "data-finish": p.StepUpFinish,
		"data-prompt": p.StepUpPrompt}
}
