package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

// The console beside the admin API on one mux, as `txkit serve` runs them: the outbox page lists
// a dead message with its Requeue button, whose script calls the API with the operator's token.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "console_example_")
	if !ok {
		return
	}
	defer done()
	schema := schemas[0]

	ob, err := outbox.New(pool, outbox.WithTable(schema, ""))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ob.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	id, err := ob.Enqueue(ctx, pool, outbox.Message{Topic: "orders", Key: "order-1", Body: []byte(`{"event":"order.cancelled"}`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	// As a relay leaves a message that failed every attempt.
	if _, err := pool.Exec(ctx, `update `+pgx.Identifier{schema, outbox.DefaultTable}.Sanitize()+` set status = 'dead', attempts = 5, last_error = 'broker down' where msg_id = $1`, id); err != nil {
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
	pages, err := console.Handler(a)
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", a.Handler())
	mux.Handle("/", pages)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/outbox", "/transactions?kind=xa"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer a-long-random-token-0123") // a browser signs in at /login instead
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := string(body)
		fmt.Println("GET", path, resp.StatusCode)
		switch path {
		case "/outbox":
			fmt.Println("dead message listed:", strings.Contains(page, `id="dead-`+id.String()+`"`))
			fmt.Println("requeue button calls:", strings.Contains(page, `data-url="/api/outbox/dead/`+id.String()+`/requeue"`))
		default:
			fmt.Println("says why:", strings.Contains(page, "want tcc, saga, 2pc, 3pc or workflow"))
		}
	}
	// Output:
	// GET /outbox 200
	// dead message listed: true
	// requeue button calls: true
	// GET /transactions?kind=xa 400
	// says why: true
}
