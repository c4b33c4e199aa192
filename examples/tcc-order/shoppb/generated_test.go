package shoppb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/txkit/txkit/examples/tcc-order/shoppb"
)

// TestGeneratedMatchesProto: every service, method, message and field that shop.proto declares
// is in the committed generated code, and nothing else is — a .proto edited without `make proto`
// fails here, without protoc. Where protoc and the plugins are installed, the committed files
// must also be what they make (sameAsProtoc).
func TestGeneratedMatchesProto(t *testing.T) {
	src, err := os.ReadFile("shop.proto")
	if err != nil {
		t.Fatal(err)
	}
	// Strip comments, then read the declarations.
	text := regexp.MustCompile(`//[^\n]*`).ReplaceAllString(string(src), "")
	var want []string
	for _, m := range regexp.MustCompile(`(service|message)\s+(\w+)\s*\{([^{}]*)\}`).FindAllStringSubmatch(text, -1) {
		want = append(want, m[1]+" "+m[2])
		re := regexp.MustCompile(`rpc\s+(\w+)\s*\(\s*(\w+)\s*\)\s*returns\s*\(\s*(\w+)\s*\)`)
		if m[1] == "message" {
			re = regexp.MustCompile(`(\w+)\s+(\w+)\s*=\s*(\d+)\s*;`)
		}
		for _, d := range re.FindAllStringSubmatch(m[3], -1) {
			want = append(want, m[2]+"."+strings.Join(d[1:], " "))
		}
	}
	fd := shoppb.File_shop_proto
	var got []string
	for i := range fd.Services().Len() {
		s := fd.Services().Get(i)
		got = append(got, "service "+string(s.Name()))
		for j := range s.Methods().Len() {
			m := s.Methods().Get(j)
			got = append(got, string(s.Name())+"."+string(m.Name())+" "+string(m.Input().Name())+" "+string(m.Output().Name()))
		}
	}
	for i := range fd.Messages().Len() {
		m := fd.Messages().Get(i)
		got = append(got, "message "+string(m.Name()))
		for j := range m.Fields().Len() {
			f := m.Fields().Get(j)
			kind := f.Kind().String()
			if f.Kind() == protoreflect.MessageKind {
				kind = string(f.Message().Name())
			}
			got = append(got, string(m.Name())+"."+kind+" "+string(f.Name())+" "+strconv.Itoa(int(f.Number())))
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) < 10 || !slices.Equal(want, got) {
		t.Fatalf("the generated code does not match shop.proto: run `make proto`\nproto:     %q\ngenerated: %q", want, got)
	}
	sameAsProtoc(t)
}

// sameAsProtoc runs `make proto`'s protoc command into a temporary directory and compares the
// output with the committed files, byte for byte but for the tools' version lines. It needs protoc
// (Debian's protobuf-compiler) and the two plugins `make proto` installs in $TXKIT_HOME/bin (or on
// PATH), and says so in the log and checks nothing more without them: the code is committed so
// that tests need none of them (and a skipped test fails CI).
func sameAsProtoc(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Log("no protoc on PATH (apt-get install protobuf-compiler): the bytes are not compared")
		return
	}
	plugins := map[string]string{}
	for _, p := range []string{"protoc-gen-go", "protoc-gen-go-grpc"} {
		path := filepath.Join(os.Getenv("TXKIT_HOME"), "bin", p)
		if _, err := os.Stat(path); os.Getenv("TXKIT_HOME") == "" || err != nil {
			if path, err = exec.LookPath(p); err != nil {
				t.Logf("no %s in $TXKIT_HOME/bin or on PATH (make proto installs it): the bytes are not compared", p)
				return
			}
		}
		plugins[p] = path
	}
	out := t.TempDir()
	cmd := exec.Command(protoc, "--plugin=protoc-gen-go="+plugins["protoc-gen-go"], "--plugin=protoc-gen-go-grpc="+plugins["protoc-gen-go-grpc"],
		"-I", ".", "--go_out="+out, "--go_opt=paths=source_relative", "--go-grpc_out="+out, "--go-grpc_opt=paths=source_relative", "shop.proto")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v: %s", err, b)
	}
	versions := regexp.MustCompile(`(?m)^// (\t|- )protoc\S*\s+v\S+\n`)
	for _, f := range []string{"shop.pb.go", "shop_grpc.pb.go"} {
		committed, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(versions.ReplaceAll(committed, nil), versions.ReplaceAll(fresh, nil)) {
			t.Errorf("%s is not what protoc makes from shop.proto: run `make proto`", f)
		}
	}
}
