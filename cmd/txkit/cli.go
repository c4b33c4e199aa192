package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txkit/txkit/admin"
)

// A command is one row of txkit's table of subcommands (see commands): `txkit <group> <verb>`, or
// `txkit <name>` for a command of its own (serve).
type command struct {
	name  string // "outbox dead": the group and the verb
	args  string // what follows the name in `txkit help`
	about string // one line for `txkit help`
	// common registers the flags every command of the group takes, before the verb or after it;
	// flags (nil: none) those of this verb only, after it. Both register into e's flags.
	common, flags func(fs *flag.FlagSet, e *env)
	run           func(ctx context.Context, e *env) error
}

// env is what a command runs with: its parsed flags, the arguments after them, the process's
// environment and its output.
type env struct {
	flags
	args           []string
	getenv         func(string) string
	stdout, stderr io.Writer
}

// flags are the values of the flags of every command; each command registers those it takes.
type flags struct {
	pg             pgFlags
	schema, table  string
	prefix         string         // tx: the log's table prefix
	zk             string         // fence: ZooKeeper servers
	limit          int            // outbox dead, tx list, notify failed
	all, reveal    bool           // outbox requeue -all, notify show -reveal
	resource, path string         // fence: the resource and the lock path
	olderThan      time.Duration  // audit purge
	filter         admin.TxFilter // tx list
	serve          serveFlags
	shards         shardFiles // tx, serve: the other log shards' databases
}

// group and verb split a command's name.
func (c command) group() string { g, _, _ := strings.Cut(c.name, " "); return g }
func (c command) verb() string  { _, v, _ := strings.Cut(c.name, " "); return v }

// usageError is an error of the caller's: exit status 2 and the usage text.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// dispatch finds the command args name in cmds, parses its flags and runs it.
func dispatch(ctx context.Context, cmds []command, args []string, e *env) error {
	if len(args) == 0 {
		return usageErr("no command")
	}
	if name := args[0]; name == "-h" || name == "-help" || name == "--help" {
		return flag.ErrHelp
	}
	if args[0] == "help" { // txkit help [COMMAND [VERB]]
		return helpOf(cmds, args[1:])
	}
	var group []command
	for _, c := range cmds {
		if c.group() == args[0] {
			group = append(group, c)
		}
	}
	if len(group) == 0 {
		return usageErr("unknown command %q", args[0])
	}
	name := args[0]
	gs := newFlagSet(name)
	group[0].common(gs, e)
	if c := group[0]; c.verb() == "" { // a command of its own: no verb
		if err := parseAll(gs, args[1:]); err != nil {
			return forCommand(err, name)
		}
		e.args = gs.Args()
		return c.run(ctx, e)
	}
	c, rest, err := findVerb(gs, group, args[1:])
	if err != nil {
		return forCommand(err, name)
	}
	// The group's flags again after the verb, on the same values: they may come before it or after it.
	vs := newFlagSet(c.name)
	gs.VisitAll(func(f *flag.Flag) { vs.Var(f.Value, f.Name, f.Usage) })
	if c.flags != nil {
		c.flags(vs, e)
	}
	if err := parseAll(vs, rest); err != nil {
		return forCommand(err, c.name)
	}
	e.args = vs.Args()
	return c.run(ctx, e)
}

// findVerb parses the group's flags up to the verb and returns the verb's command and the
// arguments after the verb.
func findVerb(gs *flag.FlagSet, group []command, args []string) (command, []string, error) {
	name := gs.Name()
	if err := parse(gs, args); err != nil {
		return command{}, nil, err
	}
	rest := gs.Args()
	if len(rest) == 0 {
		verbs := make([]string, len(group))
		for i, c := range group {
			verbs[i] = c.verb()
		}
		return command{}, nil, usageErr("%s: no verb (%s)", name, strings.Join(verbs, ", "))
	}
	for _, c := range group {
		if c.verb() == rest[0] {
			return c, rest[1:], nil
		}
	}
	return command{}, nil, usageErr("%s: unknown verb %q", name, rest[0])
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by run
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%s: %v", fs.Name(), err)
	}
	return nil
}

// parseAll parses fs's flags anywhere among args (`tx show GID -schema S` as `tx show -schema S
// GID`): the arguments that are not flags are kept, in order, as fs.Args(). After "--" every
// argument is kept as it is.
func parseAll(fs *flag.FlagSet, args []string) error {
	var kept []string
	for {
		if err := parse(fs, args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 || (len(rest) < len(args) && args[len(args)-len(rest)-1] == "--") {
			kept = append(kept, rest...)
			break
		}
		kept = append(kept, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, kept...)) // fs.Args() = kept
}

// helpError asks for the help of the commands named name ("" for all of them): `-h` after a
// command, or `txkit help COMMAND [VERB]`. It wraps [flag.ErrHelp].
type helpError struct{ name string }

func (e *helpError) Error() string { return "help " + e.name }
func (e *helpError) Unwrap() error { return flag.ErrHelp }

// forCommand makes a request for help (flag.ErrHelp) the help of command name; other errors pass.
func forCommand(err error, name string) error {
	if errors.Is(err, flag.ErrHelp) && !errors.As(err, new(*helpError)) {
		return &helpError{name}
	}
	return err
}

// helpOf is `txkit help [COMMAND [VERB]]`.
func helpOf(cmds []command, args []string) error {
	name := strings.Join(args, " ")
	if name == "" {
		return flag.ErrHelp
	}
	if len(selected(cmds, name)) == 0 {
		return usageErr("help: unknown command %q", name)
	}
	return &helpError{name}
}

// selected returns the commands that name names: a command ("tx show", "serve") or a group
// ("tx"); all of them when name is "".
func selected(cmds []command, name string) []command {
	var out []command
	for _, c := range cmds {
		if name == "" || c.name == name || c.group() == name {
			out = append(out, c)
		}
	}
	return out
}

// noArgs refuses arguments after the flags of a command that takes none.
func (e *env) noArgs(name string) error {
	if len(e.args) > 0 {
		return usageErr("%s: unexpected arguments %q", name, e.args)
	}
	return nil
}

// help is `txkit help`: the table of commands, each group's flags after its commands, with their
// defaults (those taken from the environment are named in the flags' text).
func help(cmds []command) string {
	var b strings.Builder
	b.WriteString("usage: txkit <command> [<verb>] [flags] [arguments]   (flags may also follow the arguments;\n" +
		"       txkit help <command> [<verb>] shows one command's)\n")
	e := &env{getenv: func(string) string { return "" }}
	shown := map[string]bool{} // flags listed in full already, by name and text
	for i := 0; i < len(cmds); {
		group := cmds[i].group()
		j := i
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for ; j < len(cmds) && cmds[j].group() == group; j++ {
			row(tw, strings.TrimSpace(cmds[j].name+" "+cmds[j].args), cmds[j].about)
		}
		_ = tw.Flush()
		gs := newFlagSet(group)
		cmds[i].common(gs, e)
		title := "flags of every " + group + " command (before the verb or after it):"
		if cmds[i].verb() == "" {
			title = "flags:"
		}
		writeFlags(&b, title, gs, shown)
		for _, c := range cmds[i:j] {
			if c.flags != nil {
				fs := newFlagSet(c.name)
				c.flags(fs, e)
				writeFlags(&b, "flags of "+c.name+":", fs, shown)
			}
		}
		i = j
	}
	b.WriteString("\nexit status: 0 success, 1 failure (or fewer dead messages requeued than IDs given, or nothing to\n" +
		"reset), 2 usage error\n")
	return b.String()
}

// writeFlags lists fs's flags under title: each with its argument's name, text and default, or
// named only when shown already lists it with the same text.
func writeFlags(w io.Writer, title string, fs *flag.FlagSet, shown map[string]bool) {
	fmt.Fprintf(w, "  %s\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var again []string
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if arg == "value" { // a flag.Value without a named argument
			arg = ""
		}
		name := strings.TrimSpace("-" + f.Name + " " + arg)
		if shown[name+"\x00"+text] {
			again = append(again, name)
			return
		}
		shown[name+"\x00"+text] = true
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			text += " (default " + f.DefValue + ")"
		}
		row(tw, "    "+name, text)
	})
	if len(again) > 0 {
		row(tw, "    "+strings.Join(again, ", "), "as above")
	}
	_ = tw.Flush()
}

// row writes a row of two columns to tw; the lines of text after its first continue the second
// column.
func row(tw io.Writer, first, text string) {
	for line := range strings.SplitSeq(text, "\n") {
		fmt.Fprintf(tw, "%s\t%s\n", first, line)
		first = ""
	}
}
