package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/countersign/countersign/internal/secret"
)

// envPrefix starts the environment variable of every flag: --base-url is
// COUNTERSIGN_BASE_URL.
const envPrefix = "COUNTERSIGN_"

// envName is the environment variable that sets flag name when the command
// line does not.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// errHelp means a command printed its help because it was asked to; run
// turns it into success.
var errHelp = errors.New("help shown")

// usageError is a mistake on the command line (exit status 2). Usage names
// the command's synopsis so that the message says what would have worked.
type usageError struct {
	msg   string
	usage string // e.g. "countersign tenant create NAME [flags]"; may be empty
}

func (e *usageError) Error() string { return e.msg }

func usagef(usage, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), usage: usage}
}

// command is one sub-command's flag set with its help text.
type command struct {
	fs       *flag.FlagSet
	synopsis string // "countersign tenant create NAME [flags]"
	about    string // what it does, a paragraph or more
	out      io.Writer
}

// newCommand returns an empty flag set for the sub-command; help goes to out.
func newCommand(name, synopsis, about string, out io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and reported once, by report
	fs.Usage = func() {}
	return &command{fs: fs, synopsis: synopsis, about: about, out: out}
}

// parse sets every flag from the configuration file, when the command has
// --config and one is named (see configPath), then from its environment
// variable, then from args (so the command line wins over the environment,
// which wins over the file), and returns the positional arguments. Flags may
// come before, between or after positional arguments; "--" ends the flags.
// -h or --help prints the help to out and returns errHelp.
func (c *command) parse(args []string, getenv func(string) string) ([]string, error) {
	if readsConfigFile(c.fs) {
		if path := configPath(args, getenv); path != "" {
			if err := c.applyConfigFile(path); err != nil {
				return nil, err
			}
			// A list from the file is replaced, not extended, by the
			// environment or the command line.
			markListsReplaceable(c.fs)
		}
	}
	var envErr error
	c.fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v := getenv(name)
		if v == "" || envErr != nil {
			return
		}
		if err := c.fs.Set(f.Name, v); err != nil {
			envErr = usagef(c.synopsis, "environment variable %s=%q (--%s): %s", name, v, f.Name, flagSetError(f, err))
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	// A list given on the command line replaces the environment's.
	markListsReplaceable(c.fs)
	var positional []string
	for {
		err := c.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp()
			return nil, errHelp
		}
		if err != nil {
			return nil, usagef(c.synopsis, "%v", err)
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// printHelp writes the synopsis, the description and every flag with its
// default and its environment variable.
func (c *command) printHelp() {
	w := c.out
	fmt.Fprintf(w, "Usage: %s\n\n", c.synopsis)
	if c.about != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(c.about))
	}
	n := 0
	c.fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "Flags (each also read from the environment variable shown; the command line wins):")
	c.fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if arg != "" {
			head += " " + arg
		}
		fmt.Fprintf(w, "%s\n", head)
		for line := range strings.SplitSeq(usage, "\n") {
			fmt.Fprintf(w, "      %s\n", line)
		}
		var tail []string
		if f.DefValue != "" && f.DefValue != "false" {
			tail = append(tail, fmt.Sprintf("default %s", f.DefValue))
		}
		tail = append(tail, "env "+envName(f.Name))
		fmt.Fprintf(w, "      (%s)\n", strings.Join(tail, "; "))
	})
}

// markListsReplaceable makes the next Set of every list flag that has
// values replace them instead of adding to them.
func markListsReplaceable(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if l, ok := f.Value.(*listFlag); ok {
			l.fromEnv = len(l.values) > 0
		}
	})
}

// parseFlags parses the arguments of a command that takes flags only, and
// checks that each flag named in required has a non-blank value.
func (c *command) parseFlags(args []string, getenv func(string) string, required ...string) error {
	pos, err := c.parse(args, getenv)
	if err != nil {
		return err
	}
	if err := c.wantArgs(pos); err != nil {
		return err
	}
	values := make(map[string]string, len(required))
	for _, name := range required {
		values[name] = c.fs.Lookup(name).Value.String()
	}
	return c.required(values)
}

// wantArgs checks the number of positional arguments.
func (c *command) wantArgs(got []string, names ...string) error {
	if len(got) == len(names) {
		return nil
	}
	if len(got) < len(names) {
		return usagef(c.synopsis, "missing %s", strings.Join(names[len(got):], " and "))
	}
	return usagef(c.synopsis, "unexpected argument %q", got[len(names)])
}

// required checks that each named string flag has a non-blank value.
func (c *command) required(values map[string]string) error {
	var missing []string
	c.fs.VisitAll(func(f *flag.Flag) {
		if v, ok := values[f.Name]; ok && strings.TrimSpace(v) == "" {
			missing = append(missing, "--"+f.Name)
		}
	})
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return usagef(c.synopsis, "%s is required", missing[0])
	default:
		return usagef(c.synopsis, "%s are required", strings.Join(missing, ", "))
	}
}

// listFlag is a flag that takes several values: repeated (--origin A
// --origin B) or comma-separated (--origin A,B). Values from the
// environment are replaced, not extended, by the command line.
type listFlag struct {
	values  []string
	fromEnv bool
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.values, ",")
}

func (l *listFlag) Set(v string) error {
	if l.fromEnv {
		l.values, l.fromEnv = nil, false
	}
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			l.values = append(l.values, part)
		}
	}
	return nil
}

// passwordHashFlag is --password-hash, the argon2id cost of new password
// hashes, for every command that hashes a password.
func passwordHashFlag(fs *flag.FlagSet, dst *secret.PasswordParams) {
	fs.TextVar(dst, "password-hash", secret.DefaultPasswordParams,
		"argon2id cost of new password hashes, `m=KIB,t=PASSES,p=THREADS`;\nstored hashes keep their own")
}
