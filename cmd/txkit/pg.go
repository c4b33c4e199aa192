package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pgFlags say which PostgreSQL a command connects to. The URL may carry a password: given with -pg
// it shows in the process list (ps, /proc/<pid>/cmdline) to every user of the machine, so
// $TXKIT_PG_URL and -pg-file (a file holding the URL, readable only by its owner) are the ways to
// pass one.
type pgFlags struct {
	url, file string
}

func (p *pgFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.url, "pg", p.url, "PostgreSQL URL (shows in the process list: prefer $TXKIT_PG_URL or -pg-file)")
	fs.StringVar(&p.file, "pg-file", p.file, "file holding the PostgreSQL URL")
}

// maxURLFile bounds what -pg-file reads.
const maxURLFile = 64 << 10

// resolve returns the URL: -pg, else the contents of -pg-file, else $TXKIT_PG_URL.
func (p *pgFlags) resolve(getenv func(string) string) (string, error) {
	switch {
	case p.url != "" && p.file != "":
		return "", usageErr("give -pg or -pg-file, not both")
	case p.url != "":
		return p.url, nil
	case p.file != "":
		f, err := os.Open(p.file)
		if err != nil {
			return "", fmt.Errorf("-pg-file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxURLFile+1))
		if err != nil {
			return "", fmt.Errorf("-pg-file %s: %w", p.file, err)
		}
		url := strings.TrimSpace(string(b))
		if url == "" || len(b) > maxURLFile || strings.ContainsAny(url, "\r\n") {
			return "", fmt.Errorf("-pg-file %s: want one line holding a PostgreSQL URL", p.file)
		}
		return url, nil
	}
	if url := getenv("TXKIT_PG_URL"); url != "" {
		return url, nil
	}
	return "", usageErr("no PostgreSQL URL: set TXKIT_PG_URL, -pg-file or -pg")
}

// printable escapes what a terminal would act on in s — control characters (ESC, CR, BEL, the C1
// controls), Unicode format characters (bidirectional overrides) and invalid UTF-8 — as Go escapes
// (\x1b, \u202e), so that text stored by others (last errors, keys, payloads) cannot move the
// cursor, retitle the window or hide what is printed around it. A backslash is escaped too, so
// that an escape in the output always means an escaped character.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
