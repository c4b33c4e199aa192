package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// TestIntegrationTxListAcrossShards: given the other log shards' databases with
// -log-shard-file, tx list lists the transactions of every shard and tx show finds one on its
// shard; a shard file that cannot be read is an error naming the flag.
func TestIntegrationTxListAcrossShards(t *testing.T) {
	dbs := testenv.PGShards(t, 3)
	var gids []string
	var files []string
	for i, s := range dbs {
		_, gid := newTxLog(t, s.Pool, core.KindTCC, []core.Branch{{Name: "stock", Target: core.Target{Kind: core.TargetInProc, Ref: "stock"}}})
		gids = append(gids, gid)
		if i > 0 {
			f := filepath.Join(t.TempDir(), "shard-url")
			if err := os.WriteFile(f, []byte(s.URL+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			files = append(files, "-log-shard-file", f)
		}
	}
	env := map[string]string{"TXKIT_PG_URL": dbs[0].URL}
	code, out, stderr := txkit(t, env, append([]string{"tx", "list", "-unfinished"}, files...)...)
	if code != exitOK {
		t.Fatalf("tx list: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	for _, gid := range gids {
		if !strings.Contains(out, gid) {
			t.Errorf("tx list does not list %s:\n%s", gid, out)
		}
	}
	code, out, stderr = txkit(t, env, append([]string{"tx", "show", "-prefix", "txkit_"}, append(files, gids[2])...)...)
	if code != exitOK || !strings.Contains(out, gids[2]) || !strings.Contains(out, "stock") {
		t.Fatalf("tx show of shard 2's transaction: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = txkit(t, env, "tx", "list", "-log-shard-file", filepath.Join(t.TempDir(), "missing"))
	if code == exitOK || !strings.Contains(stderr, "log-shard-file") {
		t.Fatalf("tx list with a missing shard file: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
