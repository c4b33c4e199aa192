package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

var update = flag.Bool("update", false, "copy the browser test's overview screenshot to docs/console.png")

// browserFlags are the flags the browser runs with: headless, no sandbox (containers and root),
// and nothing that talks to the network on its own.
func browserFlags(path, dir string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1360, 860),
	}
}

// browser starts a headless Chromium of the test's own (a fresh profile) and returns a chromedp
// context on one tab of it. Every JavaScript dialog is accepted, a prompt with promptText; the
// dialogs' messages go to the returned function. The browser is stopped when the test ends.
func browser(t *testing.T, promptText string) (ctx context.Context, dialogs func() []string) {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserFlags(testenv.Chromium(t), t.TempDir())...)
	ctx, cancel := chromedp.NewContext(alloc)
	var (
		mu   sync.Mutex
		seen []string
		wg   sync.WaitGroup
	)
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	wg.Go(func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, string(ev.Type)+": "+ev.Message)
			mu.Unlock()
			p := page.HandleJavaScriptDialogParams{Accept: true}
			if ev.Type == page.DialogTypePrompt {
				p.PromptText = promptText
			}
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, p); err != nil && ctx.Err() == nil {
				mu.Lock()
				seen = append(seen, "ERROR handling the dialog: "+err.Error())
				mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		wg.Wait()
	})
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// do runs steps in the browser within limit, failing the test with what.
func do(t *testing.T, ctx context.Context, limit time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// shot takes a full-page PNG screenshot and saves it as name (see saveShot). A capture that fails
// or hangs (a page reloading under it) is tried again, three times at most.
func shot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	var errs []error
	for range 3 {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		cancel()
		if err == nil {
			p := saveShot(t, name, png)
			t.Logf("screenshot %s", p)
			return p
		}
		errs = append(errs, err)
	}
	t.Fatalf("screenshot %s: %v", name, errors.Join(errs...))
	return ""
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// failingPublisher is the broker of the first relay: it refuses every message, so the relay
// retries and then gives the message up as dead.
type failingPublisher struct{}

func (failingPublisher) Publish(context.Context, outbox.Message) error {
	return errors.New("broker unreachable: connection refused (the test's first relay)")
}

// relayOn returns a relay of ob publishing through pub under an election at path, as id.
func relayOn(t *testing.T, ob *outbox.Outbox, pub outbox.Publisher, path, id string, opts ...outbox.RelayOption) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(ob, pub, append([]outbox.RelayOption{outbox.WithElector(zkenv.Elector(t, path, id))}, opts...)...)
	must(t, err, "outbox.NewRelay")
	return r
}

// notifier runs a notifier of the schema's notifications with one receiver, "shop", whose
// endpoint is a real inbox.Inbox (its own idempotency store) that answers 503 while down is
// true. Each notification gets one attempt (no retries), so one sent while the shop is down
// fails at once.
func notifier(t *testing.T, svc *tccOrder, down *atomic.Bool) *notify.Notifier {
	t.Helper()
	const secret = "console-browser-secret-0123456789"
	store, err := idempotency.New(svc.Pool, idempotency.WithTable(svc.Schema, ""))
	must(t, err, "idempotency.New")
	must(t, store.Migrate(t.Context()), "idempotency Migrate")
	in, err := inbox.New(svc.Pool, store, "shop", []string{secret}, func(context.Context, pgx.Tx, notify.Delivery) error { return nil })
	must(t, err, "inbox.New")
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "shop down for maintenance", http.StatusServiceUnavailable)
			return
		}
		in.ServeHTTP(w, r)
	}))
	t.Cleanup(shop.Close)
	n, err := notify.New(svc.Pool, []notify.Receiver{{Name: "shop", URL: shop.URL, Secrets: []string{secret}}},
		notify.WithTable(svc.Schema, ""), notify.WithPlainHTTP(), notify.WithSchedule([]time.Duration{}, 0),
		notify.WithTick("@every 100ms", 100), notify.WithElector(zkenv.Elector(t, svc.Root+"/notify", "notifier-1")))
	must(t, err, "notify.New")
	must(t, n.Migrate(t.Context()), "notify Migrate")
	testenv.Run(t, n.Run)
	return n
}

// TestIntegrationConsoleBrowser drives the console in a real headless Chromium while the tcc-order
// example runs on the real servers: it signs in on the console's form (a wrong token refused), the
// one time it gives the token; it sees the overview reload itself and switches that off;
// finds a cancelled order's transaction through the list's filter form, opens its detail page and
// sees its branches; sees a dead outbox message's body redacted (made dead by a relay whose
// publishes fail), reveals it, then presses Requeue, accepts the confirmation, and sees the message
// leave the dead list and get published to RocketMQ by a second relay; presses Redeliver on a
// notification that failed while its receiver (a real inbox.Inbox) was down and sees it
// delivered, with no token prompt at any point; and finds the three calls in the audit table.
// Screenshots go to $TXKIT_HOME/artifacts/console (and the test's ArtifactDir); with -update the
// overview is copied to docs/console.png for the README.
func TestIntegrationConsoleBrowser(t *testing.T) {
	svc := startTCCOrder(t)
	ctx := t.Context()

	// Orders: confirmed ones, a TCC order refused for lack of stock (cancelled), and a saga whose
	// debit is refused (its stock step compensated).
	for i := range 3 {
		if _, st := svc.place(t, map[string]any{"sku": "sku-1", "qty": 1 + i, "account": "alice", "amount": 10}); st != "confirmed" {
			t.Fatalf("order %d: %s, want confirmed", i, st)
		}
	}
	cancelled, st := svc.place(t, map[string]any{"sku": "sku-2", "qty": 1_000_000, "account": "bob", "amount": 10})
	if st != "cancelled" {
		t.Fatalf("order of too much stock: %s, want cancelled", st)
	}
	if _, st := svc.place(t, map[string]any{"sku": "sku-2", "qty": 1, "account": "bob", "amount": 1_000_000, "mode": "saga"}); st != "compensated" {
		t.Fatalf("saga order beyond the balance: %s, want compensated", st)
	}

	// The outbox and the notifications of the same schema, and a message the first relay cannot
	// publish.
	ob, err := outbox.New(svc.Pool, outbox.WithTable(svc.Schema, ""))
	must(t, err, "outbox.New")
	must(t, ob.Migrate(ctx), "outbox Migrate")
	// A notification the shop refuses (down): failed after its one attempt.
	var shopDown atomic.Bool
	shopDown.Store(true)
	nt := notifier(t, svc, &shopDown)
	var nid uuid.UUID
	must(t, pgx.BeginFunc(ctx, svc.Pool, func(tx pgx.Tx) (err error) {
		nid, err = nt.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: cancelled,
			Payload: json.RawMessage(`{"order":"` + cancelled + `","status":"cancelled"}`)})
		return err
	}), "notify Enqueue")
	topic := testenv.Topic(t)
	msgID, err := ob.Enqueue(ctx, svc.Pool, outbox.Message{Topic: topic, Key: cancelled,
		Body: []byte(`{"event":"order.cancelled","gid":"` + cancelled + `"}`)})
	must(t, err, "Enqueue")
	relayPath := svc.Root + "/relay"
	reg := prometheus.NewRegistry() // both relays' metrics, the overview's figures
	first := relayOn(t, ob, failingPublisher{}, relayPath, "relay-failing", outbox.WithTelemetry(reg, nil),
		outbox.WithRetry(3, 10*time.Millisecond, 50*time.Millisecond), outbox.WithSchedule("@every 100ms", 128))
	firstCtx, stopFirst := context.WithCancel(context.Background())
	testenv.Run(t, func(context.Context) error { return first.Run(firstCtx) }) // until stopFirst (it resigns)
	t.Cleanup(stopFirst)

	sess, err := zklock.NewSession(ctx, testenv.ZK(t), zkenv.Auth(t))
	must(t, err, "zklock.NewSession")
	t.Cleanup(func() { _ = sess.Close() })
	token := "console-browser-" + strings.ReplaceAll(uuid.NewString(), "-", "")
	a, err := admin.New(svc.Pool, admin.WithSchema(svc.Schema), admin.WithTokens(map[string]string{"browser-test": token}, nil),
		admin.WithInspected([]admin.Election{
			{Name: "tcc recovery", Path: svc.Election + "/tcc", Inspector: sess.Inspector()},
			{Name: "saga recovery", Path: svc.Election + "/saga", Inspector: sess.Inspector()},
			{Name: "outbox relay", Path: relayPath, Inspector: sess.Inspector()},
			{Name: "notifier", Path: svc.Root + "/notify", Inspector: sess.Inspector()}}, nil),
		admin.WithMetrics(nil, reg))
	must(t, err, "admin.New")
	must(t, a.Migrate(ctx), "admin Migrate")
	pages, err := console.Handler(a)
	must(t, err, "console.Handler")
	mux := http.NewServeMux()
	mux.Handle("/api/", a.Handler())
	mux.Handle("/", pages)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		dead, err := a.DeadMessages(ctx, 10, uuid.Nil)
		return err == nil && len(dead) == 1 && dead[0].ID == msgID
	}, "message %s dead after the failing relay's attempts", msgID)
	stopFirst()
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		r, err := nt.Get(ctx, nid)
		return err == nil && r.Status == notify.StatusFailed
	}, "notification %s failed (the shop answers 503)", nid)
	if s := first.Stats(); s.Dead != 1 || s.Published != 0 {
		t.Fatalf("failing relay: %+v, want 1 dead and nothing published", s)
	}
	pub, err := rocketmq.NewPublisher(ctx, testenv.Namesrv(t))
	must(t, err, "rocketmq.NewPublisher")
	t.Cleanup(func() { _ = pub.Close() })
	second := relayOn(t, ob, pub, relayPath, "relay-rocketmq", outbox.WithSchedule("@every 200ms", 128), outbox.WithTelemetry(reg, nil),
		outbox.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	testenv.Run(t, second.Run)
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		ls, err := a.Leaders(ctx)
		if err != nil {
			return false
		}
		for _, l := range ls {
			if l.Election == "outbox relay" && l.ID == "relay-rocketmq" {
				return true
			}
		}
		return false
	}, "the RocketMQ relay leads")

	b, dialogs := browser(t, token)

	// Signing in: the console asks for the token once, on its sign-in form; a wrong one is refused.
	do(t, b, 60*time.Second, "open the console", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("login")))
	if got := eval[bool](t, b, `document.getElementById('card-outbox') === null`); !got {
		t.Fatal("the overview shows before signing in")
	}
	do(t, b, 30*time.Second, "sign in with a wrong token",
		chromedp.SendKeys(chromedp.ID("token"), "not-the-token-0123456789"), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("login-error")))
	do(t, b, 30*time.Second, "sign in",
		chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`#login button[type=submit]`)), // the form comes back empty
		chromedp.WaitVisible(chromedp.ID("card-outbox")))

	// The overview: the dead message shows in the outbox card.
	if got := eval[string](t, b, `document.getElementById('outbox-dead').textContent + ', ' + document.getElementById('notify-failed').textContent`); got != "1 dead, 1 failed" {
		t.Fatalf("overview: %q, want 1 dead message, 1 failed notification", got)
	}
	// The last hour's rollbacks, split: both orders were refused by a participant (a business
	// refusal, not a failure), none timed out or failed.
	if got := eval[string](t, b, `['hour-aborted', 'hour-refused', 'hour-timed-out', 'hour-failed'].map(id => document.getElementById(id).textContent).join(' ')`); got != "2 2 0 0" {
		t.Fatalf("overview rolled back, refused, timed out, failed: %q, want 2 2 0 0", got)
	}
	overview := shot(t, b, "overview.png")
	// The page reloads itself (every 5 s by default): wait for one reload, then switch it off
	// with the page's checkbox, which holds for the tab's other pages, so that none reloads under
	// the test's clicks.
	at := eval[string](t, b, `document.getElementById('updated').dataset.at`)
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		sctx, cancel := context.WithTimeout(b, 5*time.Second)
		defer cancel()
		now, err := chromedp.Run(sctx, chromedp.Evaluate[string](`document.getElementById('updated').dataset.at`))
		return err == nil && now != at
	}, "the overview to reload itself")
	do(t, b, 10*time.Second, "switch auto-refresh off", chromedp.WaitVisible(chromedp.ID("autorefresh")), chromedp.Click(chromedp.ID("autorefresh")))
	if off := eval[string](t, b, `sessionStorage.getItem('txkit-console-refresh-off') || ''`); off != "1" {
		t.Fatalf("auto-refresh not switched off (sessionStorage %q)", off)
	}

	// The transactions list, filtered by the form to the cancelled ones, holds the cancelled order.
	row := fmt.Sprintf(`tr.tx[data-gid=%q]`, cancelled)
	do(t, b, 30*time.Second, "filter the transactions",
		chromedp.Navigate(srv.URL+"/transactions"), chromedp.WaitVisible(chromedp.ID("tx-filter")),
		chromedp.SetValue(chromedp.CSS(`#tx-filter select[name=status]`), "cancelled"),
		chromedp.Click(chromedp.CSS(`#tx-filter button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(row)))
	shot(t, b, "transactions.png")
	statuses := eval[[]string](t, b, `[...document.querySelectorAll('tr.tx')].map(r => r.dataset.status)`)
	for _, s := range statuses {
		if s != "cancelled" {
			t.Fatalf("filtered list shows statuses %v, want only cancelled", statuses)
		}
	}

	// Its detail page: the branch timeline.
	do(t, b, 30*time.Second, "open the cancelled transaction",
		chromedp.Click(chromedp.CSS(row+` a.gid`)), chromedp.WaitVisible(chromedp.ID("branches")))
	if got := eval[string](t, b, `document.getElementById('tx').dataset.gid`); got != cancelled {
		t.Fatalf("detail page of %q, want %q", got, cancelled)
	}
	branches := eval[[]string](t, b, `[...document.querySelectorAll('#branches li.branch')].map(li => li.dataset.branch + ' ' + li.dataset.status)`)
	// The order's branches run their tries side by side: stock's refusal may cancel the
	// transaction before the account's try registered its branch, so the account may be missing.
	shown := map[string]bool{}
	for _, s := range branches {
		f := strings.Fields(s)
		if len(f) != 2 || f[1] != "cancelled" {
			t.Fatalf("branches shown %q, want each cancelled", branches)
		}
		shown[f[0]] = true
	}
	if !shown["stock"] || len(branches) < 2 {
		t.Fatalf("branches shown %q, want the refusing stock among at least two", branches)
	}
	t.Logf("transaction %s: branches %q", cancelled, branches)
	// Why it rolled back: refused by the stock participant, whose reason the stock branch shows.
	if got := eval[string](t, b, `document.getElementById('tx-cause').dataset.cause + ': ' + document.getElementById('tx-cause').textContent`); got != "refused: refused by a participant" {
		t.Fatalf("the cancelled order's cause: %q, want refused by a participant", got)
	}
	if got := eval[string](t, b, `(document.querySelector('li.branch[data-branch=stock] [data-refusal]') || {}).textContent || ''`); !strings.Contains(got, "1000000 of sku-2 not available") {
		t.Fatalf("the stock branch's refusal shown: %q, want the stock service's reason", got)
	}
	if got := eval[bool](t, b, `document.body.textContent.includes('next retry')`); got {
		t.Fatal("a finished transaction shows a next retry")
	}
	shot(t, b, "transaction.png")

	// The outbox page: the dead message's body shows redacted until Reveal (confirmed; the token
	// from the sign-in, no prompt) shows it; then Requeue it, confirmed.
	deadRow := "dead-" + msgID.String()
	do(t, b, 30*time.Second, "open the outbox", chromedp.Navigate(srv.URL+"/outbox"), chromedp.WaitVisible(chromedp.ID(deadRow)))
	shot(t, b, "outbox-dead.png")
	bodyCell := `document.querySelector('#` + deadRow + ` [data-secret=body]')`
	if got := eval[string](t, b, bodyCell+`.textContent`); strings.Contains(got, "order.cancelled") || !strings.Contains(got, "bytes · sha256") {
		t.Fatalf("dead message body before Reveal: %q, want it redacted", got)
	}
	do(t, b, 30*time.Second, "press Reveal", chromedp.Click(chromedp.CSS(`#`+deadRow+` button[data-action=reveal]`)))
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		sctx, cancel := context.WithTimeout(b, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(sctx, chromedp.Evaluate[string](bodyCell+`.textContent`))
		return err == nil && got == `{"event":"order.cancelled","gid":"`+cancelled+`"}`
	}, "the dead message's body shown after Reveal (dialogs: %q)", dialogs())
	do(t, b, 30*time.Second, "press Requeue", chromedp.Click(chromedp.CSS(`#`+deadRow+` button[data-action=requeue]`)))
	// The page reloads after the API answers; the message is then pending or already published,
	// and gone from the dead list either way.
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		sctx, cancel := context.WithTimeout(b, 5*time.Second)
		defer cancel()
		gone, err := chromedp.Run(sctx, chromedp.Evaluate[bool](`document.getElementById('no-dead') !== null && document.getElementById('`+deadRow+`') === null`))
		return err == nil && gone
	}, "the outbox page to show no dead message after Requeue (dialogs: %q)", dialogs())
	ds := dialogs()
	if len(ds) != 2 || !strings.HasPrefix(ds[0], "confirm: Show the body and headers of message "+msgID.String()) ||
		!strings.HasPrefix(ds[1], "confirm: Requeue message "+msgID.String()) {
		t.Fatalf("dialogs %q, want the two confirmations and no token prompt (the sign-in gave it)", ds)
	}
	// Published by the RocketMQ relay: the row is gone from the table (the relay deletes what it
	// sent) and the relay counted it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var row string
		err := svc.Pool.QueryRow(ctx, `select coalesce(string_agg(status || ' ' || attempts || ' ' || coalesce(last_error, ''), ''), '') from `+
			pgx.Identifier{svc.Schema, outbox.DefaultTable}.Sanitize()+` where msg_id = $1`, msgID).Scan(&row)
		if err == nil && row == "" && second.Stats().Published >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s not published by the RocketMQ relay within 30s: its row %q (%v); relay %+v", msgID, row, err, second.Stats())
		}
		must(t, testPause(ctx, 50*time.Millisecond), "wait")
	}
	do(t, b, 30*time.Second, "reload the outbox", chromedp.Navigate(srv.URL+"/outbox"), chromedp.WaitVisible(chromedp.ID("no-dead")))
	if got := eval[string](t, b, `document.getElementById('outbox-pending').textContent`); got != "0" {
		t.Fatalf("outbox pending %q after the publish, want 0", got)
	}
	shot(t, b, "outbox-requeued.png")
	// The overview's figures, from the relays' metrics: the dead message and its publish.
	do(t, b, 30*time.Second, "open the overview again", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("figures")))
	figures := eval[map[string]string](t, b, `Object.fromEntries([...document.querySelectorAll('#figures tr')].map(r => [r.dataset.metric, r.cells[1].textContent]))`)
	if figures["txkit_outbox_dead_total"] != "1" || figures["txkit_outbox_published_total"] != "1" {
		t.Fatalf("overview figures %v, want txkit_outbox_dead_total 1 and txkit_outbox_published_total 1", figures)
	}

	// The notifications page: the shop is up again; Redeliver the failed notification, confirm
	// (the token is kept in the tab: no prompt), and see it delivered.
	shopDown.Store(false)
	notifRow := "notification-" + nid.String()
	do(t, b, 30*time.Second, "open the notifications", chromedp.Navigate(srv.URL+"/notifications"), chromedp.WaitVisible(chromedp.ID(notifRow)))
	shot(t, b, "notifications-failed.png")
	do(t, b, 30*time.Second, "press Redeliver", chromedp.Click(chromedp.CSS(`#`+notifRow+` button[data-action=redeliver]`)))
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		sctx, cancel := context.WithTimeout(b, 5*time.Second)
		defer cancel()
		gone, err := chromedp.Run(sctx, chromedp.Evaluate[bool](`document.getElementById('no-failed') !== null`))
		return err == nil && gone
	}, "the notifications page to show no failed notification after Redeliver (dialogs: %q)", dialogs())
	if ds := dialogs(); len(ds) != 3 || !strings.HasPrefix(ds[2], "confirm: Redeliver notification "+nid.String()) {
		t.Fatalf("dialogs %q, want a third one, the Redeliver confirmation, and no prompt", ds)
	}
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		r, err := nt.Get(ctx, nid)
		return err == nil && r.Status == notify.StatusDelivered
	}, "notification %s delivered after Redeliver", nid)
	do(t, b, 30*time.Second, "open the notification", chromedp.Navigate(srv.URL+"/notifications/"+nid.String()),
		chromedp.WaitVisible(chromedp.ID("tries")))
	status := eval[string](t, b, `document.getElementById('notification').dataset.status`)
	answers := eval[[]string](t, b, `[...document.querySelectorAll('#tries tbody tr')].map(r => r.cells[2].textContent.trim())`)
	if status != "delivered" || len(answers) != 2 || answers[0] != "503" || !strings.HasPrefix(answers[1], "2") {
		t.Fatalf("notification page: %s, attempts answered %q; want delivered after a 503 and a 2xx", status, answers)
	}
	shot(t, b, "notification-delivered.png")

	// The audit page records who requeued it.
	audit, err := a.Audit(ctx, 10)
	must(t, err, "Audit")
	for _, want := range []struct{ action, target string }{{admin.ActionRevealMessage, msgID.String()},
		{admin.ActionRequeue, msgID.String()}, {admin.ActionRedeliver, nid.String()}} {
		var recorded bool
		for _, e := range audit {
			recorded = recorded || (e.Actor == "browser-test" && e.Action == want.action && e.Target == want.target && e.Result == admin.ResultOK)
		}
		if !recorded {
			t.Fatalf("audit %+v, want the browser's %s of %s", audit, want.action, want.target)
		}
	}
	do(t, b, 30*time.Second, "open the audit", chromedp.Navigate(srv.URL+"/audit"), chromedp.WaitVisible(chromedp.ID("audit")))

	if *update {
		png, err := os.ReadFile(overview)
		must(t, err, "read %s", overview)
		dst := filepath.Join(moduleRoot(t), "docs", "console.png")
		must(t, os.WriteFile(dst, png, 0o644), "write %s", dst)
		t.Logf("updated %s", dst)
	}
}
