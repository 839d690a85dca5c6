package events_test

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	netmail "net/mail"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
)

// What a reason like this must not do in a notification: make a link
// (clients link www. and bare domains; a zero-width space splits "://"),
// or hide text from the reviewer (direction override, escape sequence).
const sneaky = "\x1b[2J\u202Efdp.exe www.cs-approve.example/p https:\u200b//e.x/a"

func checkSneaky(t *testing.T, where, text string, whole bool) {
	t.Helper()
	for _, bad := range []string{"www.cs", "cs-approve.example", "e.x/a", "\u200b", "\u202e", "\x1b"} {
		if strings.Contains(text, bad) {
			t.Errorf("%s holds %q:\n%s", where, bad, text)
		}
	}
	for _, want := range []string{"www[.]cs-approve[.]example/p", "⟨U+200B⟩", "⟨U+202E⟩", "⟨U+001B⟩"} {
		if !whole {
			break // a subject shows the summary's start only
		}
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", where, want, text)
		}
	}
}

func TestNotificationsShowAgentTextUnlinkedAndVisible(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail, models.ChannelSlack)
	p := newPickyServer(t)
	var (
		mu    sync.Mutex
		texts []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct{ Text string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		texts = append(texts, b.Text)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	cfg := pickyConfig(p)
	cfg.SlackWebhookURL = hook.URL
	ev := e.events(cfg)
	e.proposeAs(bobsAgent, "ord_1001", 100, sneaky)
	drain(t, ev)
	msgs := p.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	msg, err := netmail.ReadMessage(strings.NewReader(msgs[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(msgs[0].Data, "\r\n\r\n")
	checkSneaky(t, "the e-mail body", body, true)
	checkSneaky(t, "the subject", subject, false)
	mu.Lock()
	defer mu.Unlock()
	if len(texts) != 1 {
		t.Fatalf("%d Slack messages", len(texts))
	}
	checkSneaky(t, "the Slack text", texts[0], true)
}
