package main

import (
	"context"

	"github.com/countersign/countersign/models/registry"
)

// toolsExport prints the registry's tools offline, exactly as
// GET /api/v1/tools?format=... serves them.
func (c *cli) toolsExport(_ context.Context, args []string) error {
	var file, format string
	cmd := newCommand("tools export", "countersign tools export [--format countersign|openai|anthropic] [--tools FILE]",
		"Prints the tool registry as JSON for agent frameworks, the same document the\n"+
			"server serves at /api/v1/tools: countersign (the default) lists every tool\n"+
			"with its strict schema, side effect and risk tiers; openai gives strict\n"+
			"function definitions for the Chat Completions \"tools\" parameter; anthropic\n"+
			"gives Messages API tool definitions. It reads only the registry file.", c.stdout)
	toolsFlag(cmd.fs, &file)
	cmd.fs.StringVar(&format, "format", "countersign", "output `FORMAT`: countersign, openai or anthropic")
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return err
	}
	if err := cmd.wantArgs(pos); err != nil {
		return err
	}
	f, err := registry.ParseExportFormat(format)
	if err != nil {
		return usagef(cmd.synopsis, "--format: unknown format %q (countersign, openai or anthropic)", format)
	}
	reg := registry.Demo()
	if file != "" {
		if reg, err = registry.LoadFile(file); err != nil {
			return err
		}
	}
	b, err := reg.Export(f)
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(b)
	return err
}
