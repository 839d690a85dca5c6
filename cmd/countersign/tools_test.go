package main

import (
	"testing"

	"github.com/countersign/countersign/models/registry"
)

func TestToolsExportPrintsTheRegistryExport(t *testing.T) {
	example, err := registry.LoadFile("../../models/registry/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range registry.ExportFormats {
		for name, c := range map[string]struct {
			reg  *registry.Registry
			args []string
		}{
			"demo":    {registry.Demo(), nil},
			"example": {example, []string{"--tools", "../../models/registry/example.yaml"}},
		} {
			args := append([]string{"tools", "export", "--format", string(f)}, c.args...)
			got := mustExec(t, nil, "", args...).stdout
			want, err := c.reg.Export(f)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s/%s: output differs from Registry.Export:\n%s", name, f, got)
			}
		}
	}
	// The environment sets the file like every other flag.
	got := mustExec(t, map[string]string{"COUNTERSIGN_TOOLS": "../../models/registry/example.yaml"}, "", "tools", "export").stdout
	want, _ := example.Export(registry.ExportCountersign)
	if got != string(want) {
		t.Error("COUNTERSIGN_TOOLS was not used")
	}
	if r := invoke(t, nil, "", "tools", "export", "--format", "yaml"); r.err == nil {
		t.Error("an unknown format was accepted")
	}
	if r := invoke(t, nil, "", "tools", "export", "--tools", "/nonexistent.yaml"); r.err == nil {
		t.Error("a missing registry file was accepted")
	}
}
