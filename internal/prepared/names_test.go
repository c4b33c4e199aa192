package prepared_test

import (
	"strings"
	"testing"

	"github.com/txkit/txkit/internal/prepared"
)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string // err: a part of the error, "" for none
	}{
		{"plain", "east", ""},
		{"colons and quotes", "a:b'c", ""},
		{"unicode", "überweisung→ost", ""},
		{"longest", strings.Repeat("x", prepared.MaxID), ""},
		{"empty", "", "empty gid"},
		{"too long", strings.Repeat("x", prepared.MaxID+1), "longer than 199 bytes"},
		{"invalid UTF-8", "a\xffb", "not valid UTF-8"},
		{"backslash", `a\b`, "contains a backslash"},
		{"NUL", "a\x00b", "contains a control character"},
		{"newline", "a\nb", "contains a control character"},
		{"C1 control", "a\u0085b", "contains a control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := prepared.CheckName("gid", tc.in)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("CheckName(%q) = %v, want nil", tc.in, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("CheckName(%q) = %v, want an error with %q", tc.in, err, tc.err)
			}
		})
	}
}

func TestNewNamespace(t *testing.T) {
	for _, tc := range []struct {
		name, schema, prefix, want string // want: the Prefix, "" for an error
	}{
		{"schema", "app", "txkit_2pc_", "txkit:app.txkit_2pc_:"},
		{"search path", "", "txkit_3pc_", "txkit:-.txkit_3pc_:"},
		{"backslash", `a\b`, "p_", ""},
		{"control", "app", "p\n", ""},
		{"too long", strings.Repeat("s", prepared.MaxID), "p_", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, err := prepared.NewNamespace(tc.schema, tc.prefix)
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("NewNamespace(%q, %q) = %q, want an error", tc.schema, tc.prefix, ns.Prefix())
			case tc.want == "":
				if !strings.Contains(err.Error(), "namespace (schema.prefix)") {
					t.Fatalf("error %q does not name the namespace", err)
				}
			case err != nil:
				t.Fatalf("NewNamespace(%q, %q): %v", tc.schema, tc.prefix, err)
			case ns.Prefix() != tc.want:
				t.Fatalf("Prefix() = %q, want %q", ns.Prefix(), tc.want)
			}
		})
	}
}

func TestNamespaceRoundTrip(t *testing.T) {
	ns, err := prepared.NewNamespace("app", "txkit_2pc_")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, gid, branch, id string }{
		{"plain", "g1", "east", "txkit:app.txkit_2pc_:2:g1:east"},
		{"colons", "a:b:c", "x:y", "txkit:app.txkit_2pc_:5:a:b:c:x:y"},
		{"quotes", "it's", "o'brien", "txkit:app.txkit_2pc_:4:it's:o'brien"},
		{"digits", "12", "3", "txkit:app.txkit_2pc_:2:12:3"},
		{"unicode", "überweisung", "→ost", "txkit:app.txkit_2pc_:12:überweisung:→ost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := ns.ID(tc.gid, tc.branch)
			if id != tc.id {
				t.Fatalf("ID(%q, %q) = %q, want %q", tc.gid, tc.branch, id, tc.id)
			}
			gid, branch, ok := ns.Parse(id)
			if !ok || gid != tc.gid || branch != tc.branch {
				t.Fatalf("Parse(%q) = %q, %q, %v; want %q, %q, true", id, gid, branch, ok, tc.gid, tc.branch)
			}
		})
	}
}

// TestNamespaceParseRefuses: ids of other namespaces, and ids in the namespace no coordinator
// made, are not the namespace's.
func TestNamespaceParseRefuses(t *testing.T) {
	ns, err := prepared.NewNamespace("app", "txkit_2pc_")
	if err != nil {
		t.Fatal(err)
	}
	other, err := prepared.NewNamespace("app", "txkit_3pc_")
	if err != nil {
		t.Fatal(err)
	}
	p := ns.Prefix()
	for _, tc := range []struct{ name, id string }{
		{"other namespace", other.ID("g1", "east")},
		{"other schema", "txkit:app2.txkit_2pc_:2:g1:east"},
		{"foreign", "some-app-xact-17"},
		{"prefix only", p},
		{"no length", p + "g1:east"},
		{"no colon after length", p + "2"},
		{"zero length", p + "0::east"},
		{"negative length", p + "-2:g1:east"},
		{"length past the end", p + "9:g1:east"},
		{"length misses the colon", p + "3:g1:east"},
		{"empty branch", p + "2:g1:"},
		{"backslash in gid", p + `3:g\1:east`},
		{"control in branch", p + "2:g1:ea\tst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if gid, branch, ok := ns.Parse(tc.id); ok {
				t.Fatalf("Parse(%q) = %q, %q, true; want false", tc.id, gid, branch)
			}
		})
	}
	if _, _, ok := (prepared.Namespace{}).Parse("txkit::2:g1:east"); ok {
		t.Fatal("the zero Namespace parsed an id")
	}
}
