package registry

import (
	"strings"
	"testing"
)

func TestReceiptArguments(t *testing.T) {
	for value, digestOnly := range map[string]bool{"": false, "full": false, "digest": true} {
		yaml := baseYAML
		if value != "" {
			yaml = strings.Replace(baseYAML, "    policy_version: v1\n", "    policy_version: v1\n    receipt_arguments: "+value+"\n", 1)
		}
		reg, err := Parse([]byte(yaml))
		if err != nil {
			t.Fatalf("%q: %v", value, err)
		}
		tool, _ := reg.Tool("refund_order")
		if tool.ReceiptDigestOnly != digestOnly {
			t.Errorf("receipt_arguments %q: digest only = %v", value, tool.ReceiptDigestOnly)
		}
	}
	_, err := Parse([]byte(strings.Replace(baseYAML, "    policy_version: v1\n", "    policy_version: v1\n    receipt_arguments: none\n", 1)))
	if err == nil || !strings.Contains(err.Error(), `receipt_arguments "none" must be full or digest`) {
		t.Fatalf("unknown value: %v", err)
	}
}
