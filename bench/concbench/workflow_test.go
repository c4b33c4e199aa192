package concbench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/workflow"
)

// workflow: a workflow of three participant calls against the saga of the same three steps — the
// baseline here is the saga, not the bare calls, so ratio is the workflow's share of the saga's
// throughput (target 0.8) and bare-pg-commits/op the saga's. Both include the participants' three
// commits per operation; the log's writes are pg-commits/op - 3 (N+2 = 5 for a workflow of N=3
// calls, 2 for the saga: docs/workflows.md).
func workflowRecipe(b *testing.B, e *env) (concbench.Op, concbench.Op, string, bool) {
	s, pool := e.schema(b)
	parts, client := participants(b, s, pool, sagaSQL)
	ps := make([]participant.Participant, len(parts))
	for i, p := range parts {
		ps[i] = p
	}
	sagas := coordinatorOn(b, saga.New, e.pool(b, s), s.Name, coordinator.WithHTTPClient(client))
	sagaSide, _ := sagaSides(sagas, ps, ps, func(int, int) json.RawMessage { return nil })
	wf := coordinatorOn(b, workflow.New, e.pool(b, s), s.Name, coordinator.WithHTTPClient(client))
	if err := workflow.Register(wf, "three", func(ctx workflow.Context, cl int) (int, error) {
		for i, p := range ps {
			if err := workflow.Call(ctx, branch(i, cl), p, nil); err != nil {
				return 0, err
			}
		}
		return cl, nil
	}); err != nil {
		b.Fatal(err)
	}
	wfSide := func(ctx context.Context, cl int) error {
		_, err := wf.Start(ctx, "three", cl)
		return err
	}
	return wfSide, sagaSide, workflowScript(), false
}

// workflowScript is the pgbench script of a 3-call workflow's writes: its row, each call's record
// after the call (committed without waiting for the WAL flush, as the starter's records are), and
// the outcome with the final status.
func workflowScript() string {
	script := "insert into cb_log (id, status) values (gen_random_uuid(), 'running') returning id as gid \\gset\n"
	for i := range 3 {
		script += participantScript(fmt.Sprint("s", i), "action", "m = m + 1") +
			fmt.Sprintf("begin;\nset local synchronous_commit = off;\ninsert into cb_item values (:gid, 's%d', 'succeeded');\ncommit;\n", i)
	}
	return script + "begin;\ninsert into cb_item values (:gid, '$result', 'done');\nupdate cb_log set status = 'done' where id = :gid;\ncommit;\n"
}
