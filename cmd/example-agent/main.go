// Command example-agent is a minimal agent that writes through countersign
// over MCP: it connects with the agent's key, lists the tools, asks for a
// refund, prints the console link where a person decides, waits for the
// decision and, once confirmed, executes the refund and prints its receipt.
//
//	COUNTERSIGN_AGENT_KEY=csk_... example-agent --url http://127.0.0.1:8080
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "example-agent:", err)
		os.Exit(1)
	}
}

// proposal is the part of a countersign tool result this agent reads.
type proposal struct {
	ProposalID string `json:"proposal_id"`
	Status     string `json:"status"`
	RiskTier   string `json:"risk_tier"`
	ExpiresAt  string `json:"expires_at"`
	ConsoleURL string `json:"console_url"`
	Reason     string `json:"reason"`
	Next       string `json:"next"`
	Preview    struct {
		Display []struct {
			Label   string `json:"label"`
			Display string `json:"display"`
		} `json:"display"`
	} `json:"preview"`
	Executed  *bool `json:"executed"`
	Execution *struct {
		Status  string          `json:"status"`
		Receipt json.RawMessage `json:"receipt"`
	} `json:"execution"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("example-agent", flag.ContinueOnError)
	fs.SetOutput(stdout)
	base := fs.String("url", "http://127.0.0.1:8080", "countersign server `URL`")
	key := fs.String("key", "", "agent API `KEY`; default $COUNTERSIGN_AGENT_KEY")
	// Not the README walkthrough's ord_1001, which it refunds in full.
	order := fs.String("order", "ord_1020", "order to refund")
	amount := fs.Int64("amount", 1990, "amount in minor units (1990 = 19.90)")
	currency := fs.String("currency", "CNY", "ISO 4217 currency")
	reason := fs.String("reason", "parcel arrived damaged", "reason shown to the reviewer")
	maxWait := fs.Duration("wait", 10*time.Minute, "how long to wait for a person's decision")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *key == "" {
		*key = getenv("COUNTERSIGN_AGENT_KEY")
	}
	if *key == "" {
		return errors.New("no agent key: pass --key or set COUNTERSIGN_AGENT_KEY")
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "countersign-example-agent", Version: "1"}, &mcp.ClientOptions{
		// countersign points at the console page where a person decides;
		// this agent shows the link. Answering never approves anything.
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if r.Params.Mode != "url" {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			fmt.Fprintf(stdout, "countersign asks a person to decide at: %s\n", r.Params.URL)
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	transport := &mcp.StreamableClientTransport{
		Endpoint:   strings.TrimRight(*base, "/") + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key: *key, next: http.DefaultTransport}},
	}
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", transport.Endpoint, err)
	}
	defer session.Close()
	fmt.Fprintf(stdout, "connected (MCP %s)\n", session.InitializeResult().ProtocolVersion)

	tools, err := session.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "tools:")
	for _, t := range tools.Tools {
		fmt.Fprintf(stdout, "  %s\n", t.Name)
	}

	p, err := call(ctx, session, "request_refund_order", map[string]any{
		"order_id": *order, "amount_minor": *amount, "currency": *currency, "reason": *reason})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "proposed %s (risk tier %s, expires %s):\n", p.ProposalID, p.RiskTier, p.ExpiresAt)
	for _, f := range p.Preview.Display {
		fmt.Fprintf(stdout, "  %s: %s\n", f.Label, f.Display)
	}
	fmt.Fprintf(stdout, "approve it at: %s\n", p.ConsoleURL)

	deadline := time.Now().Add(*maxWait)
	for p.Status == "awaiting_confirmation" {
		if time.Now().After(deadline) {
			return fmt.Errorf("no decision within %s; %s is still awaiting confirmation", *maxWait, p.ProposalID)
		}
		fmt.Fprintln(stdout, "waiting for a person's decision...")
		if p, err = call(ctx, session, "get_proposal", map[string]any{"proposal_id": p.ProposalID, "wait_seconds": 30}); err != nil {
			return err
		}
	}
	if p.Status != "confirmed" {
		fmt.Fprintf(stdout, "not executed: %s\n", p.Next)
		return fmt.Errorf("proposal %s ended %s", p.ProposalID, p.Status)
	}
	fmt.Fprintln(stdout, "confirmed; executing")
	done, err := call(ctx, session, "execute_confirmed", map[string]any{"proposal_id": p.ProposalID})
	if err != nil {
		return err
	}
	if done.Execution == nil {
		return fmt.Errorf("not executed: %s", done.Next)
	}
	var receipt bytes.Buffer
	if err := json.Indent(&receipt, done.Execution.Receipt, "", "  "); err != nil {
		return fmt.Errorf("unexpected receipt %s", done.Execution.Receipt)
	}
	fmt.Fprintf(stdout, "execution %s; receipt:\n%s\n", done.Execution.Status, receipt.Bytes())
	return nil
}

// call calls a countersign tool; a tool error becomes an error.
func call(ctx context.Context, s *mcp.ClientSession, name string, args map[string]any) (proposal, error) {
	var p proposal
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return p, fmt.Errorf("%s: %w", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text.WriteString(t.Text)
		}
	}
	if res.IsError {
		return p, fmt.Errorf("%s: %s", name, text.String())
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: unexpected result %s", name, b)
	}
	return p, nil
}

// bearer sends the agent key with every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}
