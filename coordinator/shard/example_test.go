package shard_test

import (
	"context"
	"fmt"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/coordinator/shard"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// Example routes four orders over two log shards and reads each one's status back. Here the
// shards are two schemas of one database; in production each is a database on its own primary,
// reached by its own pool, and each coordinator has its own elector for Run.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "shard0_", "shard1_")
	if !ok {
		return
	}
	defer done()

	var cs []*tcc.Coordinator
	for _, schema := range schemas {
		c, err := tcc.New(pool, coordinator.WithSchema(schema))
		if err != nil {
			fmt.Println(err)
			return
		}
		cs = append(cs, c)
	}
	r, err := shard.New(cs...)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := r.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	stock, _ := r.Register("stock", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	for i := 1; i <= 4; i++ {
		g, err := r.Begin(ctx, coordinator.WithGID(fmt.Sprintf("order-%d", i)))
		if err == nil {
			err = g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock})
		}
		if err == nil {
			err = g.Commit(ctx)
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		st, err := r.Status(ctx, g.GID())
		shardOf := 0
		if r.For(g.GID()) == r.Shards()[1] {
			shardOf = 1
		}
		fmt.Printf("%s: shard %d, %v, %v\n", g.GID(), shardOf, st, err)
	}
	// Output:
	// order-1: shard 0, confirmed, <nil>
	// order-2: shard 1, confirmed, <nil>
	// order-3: shard 0, confirmed, <nil>
	// order-4: shard 0, confirmed, <nil>
}
