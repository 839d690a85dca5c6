package registry

import (
	"fmt"
	"sync"
	"testing"
)

// A Registry is shared by every request handler: Prepare, Tier and Preview
// must be safe to call concurrently.
func TestConcurrentUse(t *testing.T) {
	tool := demoTool(t, "refund_order")
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				args := fmt.Sprintf(`{"order_id":"ord_1001","amount_minor":%d,"currency":" cny ","reason":"r"}`, 1+g*1000+i)
				p, err := tool.Prepare([]byte(args))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tool.Tier(p.Arguments); err != nil {
					t.Error(err)
					return
				}
				if _, err := tool.Preview(p.Arguments, "label", nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
