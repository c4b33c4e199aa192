package admin_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// A TCC transaction rolled back by its starter, found by an operator: through the Go API, then
// through the JSON API, which refuses a read without a token (401) and answers a bad filter with
// 400 and says what is wrong.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "admin_example_")
	if !ok {
		return
	}
	defer done()
	schema := schemas[0]

	c, err := tcc.New(pool, coordinator.WithSchema(schema))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	stock, _ := c.Register("stock", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	g, err := c.Begin(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock}); err != nil {
		fmt.Println(err)
		return
	}
	if err := g.Rollback(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Flush(ctx); err != nil { // the finish is written in the background: land it before reading the log elsewhere
		fmt.Println(err)
		return
	}

	a, err := admin.New(pool, admin.WithSchema(schema), admin.WithTokens(map[string]string{"oncall": "a-long-random-token-0123"}, nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := a.Migrate(ctx); err != nil { // the audit table
		fmt.Println(err)
		return
	}
	page, err := a.Transactions(ctx, admin.TxFilter{Status: "cancelled"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range page.Items {
		fmt.Println("log", t.Log, "kind", t.Kind, "status", t.Status, "mine:", t.GID == g.GID())
	}
	tx, err := a.Transaction(ctx, g.GID())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, b := range tx.Branches {
		fmt.Println("branch", b.Name, b.Status)
	}

	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	for _, p := range []string{"/api/transactions/" + g.GID(), "/api/transactions?kind=xa", "/api/transactions/no-such-gid"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+p, nil)
		if p != "/api/transactions/"+g.GID() { // without a credential: refused
			req.Header.Set("Authorization", "Bearer a-long-random-token-0123")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	// Output:
	// log tcc kind tcc status cancelled mine: true
	// branch stock cancelled
	// 401 {"error":"no credentials: send \"Authorization: Bearer \u003ctoken\u003e\": unauthorized"}
	// 400 {"error":"kind \"xa\": want tcc, saga, 2pc, 3pc or workflow: bad request"}
	// 404 {"error":"transaction \"no-such-gid\": not found"}
}
