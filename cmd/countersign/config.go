package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/spell"
)

// configFlag is the flag that names a configuration file. A command that
// defines it reads its flags from the file first; the environment and then
// the command line win over the file (see command.parse).
const configFlag = "config"

// configFile is the value of a --config flag that configures its command.
// It remembers which flags the file set, so that a later check of a value
// can name the file's line (see problems).
type configFile struct {
	path string
	// applied is the file that was read, set its flags by name.
	applied string
	set     map[string]configSetting
}

// configSetting is where a configuration file set a flag, and the value
// the flag had after it.
type configSetting struct {
	line  int
	value string
}

func (f *configFile) String() string {
	if f == nil {
		return ""
	}
	return f.path
}

func (f *configFile) Set(v string) error { f.path = v; return nil }

// readsConfigFile reports whether fs has a --config flag that names its
// own configuration (not, as for config check, a file to look at).
func readsConfigFile(fs *flag.FlagSet) bool {
	f := fs.Lookup(configFlag)
	if f == nil {
		return false
	}
	_, ok := f.Value.(*configFile)
	return ok
}

// configFileFlag defines --config on fs.
func configFileFlag(fs *flag.FlagSet) {
	fs.Var(&configFile{}, configFlag, "read flags from this YAML `FILE`: one key per flag, named as the flag\n(base-url: https://…); the environment and the command line win over it")
}

// configError is a mistake in a configuration file, located by line. Err,
// when set, is the cause, kept so that the reported code follows it (a
// missing file is not_found).
type configError struct {
	file string
	line int
	msg  string
	err  error
}

func (e *configError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("config %s, line %d: %s", e.file, e.line, e.msg)
	}
	return fmt.Sprintf("config %s: %s", e.file, e.msg)
}

func (e *configError) Unwrap() error { return e.err }

// configErrors are several mistakes in one configuration file, all
// reported at once so that one run of config check finds them all. It
// does not unwrap: several mistakes are invalid_request, whatever code
// one of them alone would have had.
type configErrors []*configError

func (es configErrors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problems", es[0].file, len(es))
	for _, e := range es {
		fmt.Fprintf(&b, "\n  line %d: %s", e.line, e.msg)
	}
	return b.String()
}

// fileSetting is the line of the configuration file that gave flag name
// its current value, with the file's name; line is 0 when no file set it,
// or the environment or the command line set it since.
func fileSetting(fs *flag.FlagSet, name string) (file string, line int) {
	cf := fs.Lookup(configFlag)
	f := fs.Lookup(name)
	if cf == nil || f == nil {
		return "", 0
	}
	v, ok := cf.Value.(*configFile)
	if !ok {
		return "", 0
	}
	s, ok := v.set[name]
	if !ok || s.value != f.Value.String() {
		return "", 0
	}
	return v.applied, s.line
}

// problems collects what is wrong with a command's settings, each under
// the flag it is about. A problem with a value from the configuration
// file is reported at the file's line; one with a value from the
// environment or the command line as before, as a usage error or as the
// error itself.
type problems struct {
	cmd  *command
	list []problem
}

type problem struct {
	err   error
	usage bool // a mistake on the command line (exit status 2)
	file  string
	line  int // 0 when the value did not come from the file
}

// usagef records a problem with flag's value that, given on the command
// line, is a usage error.
func (p *problems) usagef(flag, format string, args ...any) {
	p.record(flag, fmt.Errorf(format, args...), true)
}

// add records err, a problem with flag's value that is not a usage error
// (a file that cannot be read, say).
func (p *problems) add(flag string, err error) { p.record(flag, err, false) }

// record locates the problem at once: a check may go on to change the
// value (a URL cleaned), after which the file's value is no longer there
// to compare.
func (p *problems) record(flag string, err error, usage bool) {
	file, line := fileSetting(p.cmd.fs, flag)
	p.list = append(p.list, problem{err: err, usage: usage, file: file, line: line})
}

// err is nil when nothing was recorded. Otherwise it is the first problem
// with a value from outside the file (the command line and environment
// report one mistake at a time, with the usage), or else every problem in
// the file, each with its line.
func (p *problems) err() error {
	var located configErrors
	for _, pr := range p.list {
		if pr.line == 0 {
			if pr.usage {
				return &usageError{msg: pr.err.Error(), usage: p.cmd.synopsis}
			}
			return pr.err
		}
		located = append(located, &configError{file: pr.file, line: pr.line, msg: pr.err.Error(), err: pr.err})
	}
	switch len(located) {
	case 0:
		return nil
	case 1:
		return located[0]
	}
	slices.SortStableFunc(located, func(a, b *configError) int { return a.line - b.line })
	return located
}

// configPath finds the configuration file named on the command line
// (--config FILE, --config=FILE, one dash or two) or, failing that, in the
// environment. Flags after "--" are not flags.
func configPath(args []string, getenv func(string) string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != configFlag {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return getenv(envName(configFlag))
}

// applyConfigFile sets the command's flags from the YAML file at path: a
// mapping of flag names to scalars (or, for flags that take several values,
// sequences). Unknown keys, nested values, repeated keys and values the flag
// does not accept are errors naming the key and its line.
func (c *command) applyConfigFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return &configError{file: path, msg: err.Error()}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return &configError{file: path, msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	var cf *configFile
	if f := c.fs.Lookup(configFlag); f != nil {
		cf, _ = f.Value.(*configFile)
	}
	if cf != nil {
		cf.applied, cf.set = path, map[string]configSetting{}
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return &configError{file: path, line: root.Line, msg: "the file must be a mapping of flag names to values (addr: 127.0.0.1:8080)"}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			return &configError{file: path, line: k.Line, msg: "a key must be a flag name"}
		}
		if first, dup := seen[name]; dup {
			return &configError{file: path, line: k.Line, msg: fmt.Sprintf("key %q is given twice (first on line %d)", name, first)}
		}
		seen[name] = k.Line
		f := c.fs.Lookup(name)
		if f == nil || name == configFlag {
			return &configError{file: path, line: k.Line, msg: fmt.Sprintf("unknown key %q: %s has no flag --%s%s", name, commandPath(c.synopsis), name, c.suggest(name))}
		}
		var values []string
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return &configError{file: path, line: v.Line, msg: fmt.Sprintf("%s: no value", name)}
			}
			values = []string{v.Value}
		case yaml.SequenceNode:
			if _, list := f.Value.(*listFlag); !list {
				return &configError{file: path, line: v.Line, msg: fmt.Sprintf("%s: takes one value, not a list", name)}
			}
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return &configError{file: path, line: item.Line, msg: fmt.Sprintf("%s: a list item must be a single value", name)}
				}
				values = append(values, item.Value)
			}
		default:
			return &configError{file: path, line: v.Line, msg: fmt.Sprintf("%s: takes a single value, not a nested mapping", name)}
		}
		for _, val := range values {
			if err := c.fs.Set(name, val); err != nil {
				return &configError{file: path, line: v.Line, msg: fmt.Sprintf("%s: invalid value %q: %s", name, val, flagSetError(f, err))}
			}
		}
		if cf != nil {
			cf.set[name] = configSetting{line: k.Line, value: f.Value.String()}
		}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return &configError{file: path, line: extra.Line, msg: "only one YAML document is allowed"}
	}
	return nil
}

// flagSetError says why f refused a value: the flag package only says
// "parse error" for its own types, so those are named by what they want.
func flagSetError(f *flag.Flag, err error) string {
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return "want a duration such as 90s, 20m or 12h"
		case bool:
			return "want true or false"
		case int, int64, uint, uint64:
			return "want a whole number"
		case float64:
			return "want a number"
		}
	}
	return err.Error()
}

// suggest names a flag close to name, for a typo in a configuration file.
func (c *command) suggest(name string) string {
	best, bestD := "", 3
	c.fs.VisitAll(func(f *flag.Flag) {
		if d := spell.Distance(name, f.Name); d < bestD && f.Name != configFlag {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

const configCheckAbout = `
Reads a configuration file for "countersign serve" and checks it the way the
server does at start, without starting anything: every key must be a serve
flag, every value acceptable to it, and the settings consistent with each
other. The environment is not read, so what is checked is the file alone,
and the variables serve will read the HTTP adapters' secrets from are listed.
With --env the environment is read as serve reads it (COUNTERSIGN_* settings
over the file's, and the adapters' secrets): run it where the server runs.`

// configCheck is "countersign config check --config FILE [--env]".
func (c *cli) configCheck(ctx context.Context, args []string) error {
	var path string
	var withEnv bool
	cmd := newCommand("config check", "countersign config check --config FILE [--env]", configCheckAbout, c.stdout)
	cmd.fs.StringVar(&path, configFlag, "", "the YAML `FILE` to check")
	cmd.fs.BoolVar(&withEnv, "env", false, "read the environment as serve does, secrets included")
	if err := cmd.parseFlags(args, c.getenv, configFlag); err != nil {
		return err
	}
	check := *c
	if !withEnv {
		check.getenv = func(string) string { return "" }
		check.fileOnly = true
	}
	check.checkOnly = true
	if err := check.serve(ctx, []string{"--" + configFlag, path}, false); err != nil {
		return err
	}
	if withEnv {
		fmt.Fprintf(c.stdout, "%s: ok, with this environment\n", path)
		return nil
	}
	fmt.Fprintf(c.stdout, "%s: ok\n", path)
	if reg := check.checked.registry; reg != nil {
		if secrets := app.AdapterSecrets(reg); len(secrets) > 0 {
			fmt.Fprintf(c.stdout, "serve reads these secrets from the environment (check them with --env): %s\n", strings.Join(secrets, ", "))
		}
	}
	return nil
}
