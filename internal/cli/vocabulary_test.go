package cli

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/google/go-cmp/cmp"
)

// optionFlags names the flag of each request option, per command that takes it.
var optionFlags = map[string]map[string]string{
	"estimate": {
		"method": "method", "precision": "precision", "quant": "quant", "grad-ckpt": "grad_ckpt",
		"optimizer": "optimizer", "optimizer-state-dtype": "optimizer_state_dtype", "attn": "attn",
		"fused-ce": "fused_ce", "stack": "stack", "strategy": "strategy", "offload": "cpu_offload",
	},
	"bench": {
		"method": "method", "precision": "precision", "quant": "quant", "grad-ckpt": "grad_ckpt",
		"optimizer": "optimizer", "optimizer-state-dtype": "optimizer_state_dtype", "attn": "attn",
		"fused-ce": "fused_ce", "stack": "stack",
	},
}

func optionByName(t *testing.T, name string) estimate.Option {
	t.Helper()
	for _, o := range estimate.Options() {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("estimate.Options has no %s", name)
	return estimate.Option{}
}

// The kong enum of every option flag is its table's names and aliases, in
// table order: nothing typed by hand beside the table.
func TestFlagEnumsAreTables(t *testing.T) {
	var root Root
	parser, err := kong.New(&root, kong.Name("canifinetune"), vocabularyVars())
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range parser.Model.Node.Children {
		flags, ok := optionFlags[cmd.Name]
		if !ok {
			continue
		}
		seen := map[string]bool{}
		for _, f := range cmd.Flags {
			option, ok := flags[f.Name]
			if !ok {
				continue
			}
			seen[f.Name] = true
			want := enumOf(optionByName(t, option))
			var names []string
			for _, c := range optionByName(t, option).Choices {
				names = append(names, c.Name)
			}
			if !slices.Contains(want, names[len(names)-1]) || len(want) < len(names) {
				t.Fatalf("%s: enumOf %v misses table values %v", option, want, names)
			}
			if d := cmp.Diff(want, f.EnumSlice()); d != "" {
				t.Errorf("%s --%s: enum (-table +flag):\n%s", cmd.Name, f.Name, d)
			}
		}
		for name := range flags {
			if !seen[name] {
				t.Errorf("%s has no --%s flag", cmd.Name, name)
			}
		}
	}
}

// squash collapses the runs of spaces and newlines kong wraps help with, so
// that a help line can be found whole wherever the wrapping broke it.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// Every value of every option's table is listed in --help with its help line.
func TestHelpListsEveryValue(t *testing.T) {
	for cmd, flags := range optionFlags {
		out, errb, code := runMain(t, cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help exited %d: %s", cmd, code, errb)
		}
		help := squash(out)
		for _, option := range flags {
			for _, c := range optionByName(t, option).Choices {
				name := c.Name
				if len(c.Aliases) > 0 {
					name += " (or " + strings.Join(c.Aliases, ", ") + ")"
				}
				if line := "- " + name + ": " + squash(c.Help); !strings.Contains(help, line) {
					t.Errorf("%s --help lacks %s's line %q", cmd, option, line)
				}
			}
		}
	}
}

// A value added to a table is a flag value, a help line and a completion,
// with no other edit.
func TestTableValueReachesCLI(t *testing.T) {
	saved := estimate.Optimizers
	t.Cleanup(func() { estimate.Optimizers = saved })
	estimate.Optimizers = append(slices.Clone(saved), estimate.OptimizerSpec{Name: "lomo_test", Help: "an optimizer added by a test", States: 0})

	out, _, code := runMain(t, "estimate", "--help")
	if code != 0 || !strings.Contains(squash(out), "- lomo_test: an optimizer added by a test") {
		t.Errorf("estimate --help (exit %d) does not list the added optimizer", code)
	}
	out, _, code = runMain(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "lomo_test") {
		t.Errorf("completion bash (exit %d) does not offer the added optimizer", code)
	}
	out, errb, code := runMain(t, "estimate", "meta-llama/Llama-2-7b-hf", "--gpu-vram-gb", "80", "--optimizer", "lomo_test", "--json")
	if code != ExitOK || !strings.Contains(out, `"optimizer": "lomo_test"`) {
		t.Errorf("estimate --optimizer lomo_test: exit %d, stderr %s", code, errb)
	}
}

// The documents that enumerate an option's values list every value of its
// table (a value added to a table and not to the schema docs fails here).
func TestDocsListEveryValue(t *testing.T) {
	for _, doc := range []struct {
		file string
		rows map[string]string // the table row's first cell → option
	}{
		{"../../docs/estimate-json.md", map[string]string{
			"`method`": "method", "`precision`": "precision", "`quant`": "quant",
			"`grad_ckpt`": "grad_ckpt", "`fused_ce`": "fused_ce", "`cpu_offload`": "cpu_offload",
			"`kernels`": "kernels", "`task`": "task",
		}},
		{"../../docs/measurements-schema.md", map[string]string{
			"`method`": "method", "`precision`": "precision", "`grad_ckpt`": "grad_ckpt",
			"`optimizer_state_dtype`": "optimizer_state_dtype", "`attn`": "attn", "`fused_ce`": "fused_ce",
			"`sharding.strategy`": "strategy", "`sharding.cpu_offload`": "cpu_offload",
		}},
	} {
		b, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]string{} // option → its rows (a field can have one per section)
		for _, line := range strings.Split(string(b), "\n") {
			if cells := strings.Split(line, "|"); len(cells) >= 3 {
				if option, ok := doc.rows[strings.TrimSpace(cells[1])]; ok {
					rows[option] += line + "\n"
				}
			}
		}
		for _, option := range doc.rows {
			if rows[option] == "" {
				t.Errorf("%s: no row for %s", doc.file, option)
			}
			for _, c := range optionByName(t, option).Choices {
				if !strings.Contains(rows[option], "`"+c.Name+"`") && !strings.Contains(rows[option], `"`+c.Name+`"`) {
					t.Errorf("%s: the %s row does not list %s", doc.file, option, c.Name)
				}
			}
		}
	}
}
