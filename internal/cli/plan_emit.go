package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/canifinetune/canifinetune/internal/atomicfile"
	"github.com/canifinetune/canifinetune/modelsource"
	"github.com/canifinetune/canifinetune/plan"
	"github.com/canifinetune/canifinetune/recipe"
)

// checkEmitFlags checks --emit, --emit-plan and --force before the search,
// and refuses a directory that holds files unless --force.
func (c *PlanCmd) checkEmitFlags() error {
	if c.Emit == "" {
		if c.EmitPlan != 0 {
			return usageErrorf("--emit recipe/ --emit-plan 2", "--emit-plan picks the plan --emit writes; give --emit DIR too")
		}
		if c.Force {
			return usageErrorf("--emit recipe/ --force", "--force lets --emit write into a directory that holds files; give --emit DIR too")
		}
		return nil
	}
	if c.Maximize != "" {
		return usageErrorf("--emit recipe/ without --maximize", "--emit writes a ranked plan's files; --maximize ranks none")
	}
	if c.EmitPlan < 0 {
		return usageErrorf("--emit-plan 2", "--emit-plan must be a plan's rank (1 = the first), got %d", c.EmitPlan)
	}
	entries, err := os.ReadDir(c.Emit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory") {
			return usageErrorf("--emit recipe/", "--emit %s: not a directory", c.Emit)
		}
		return fmt.Errorf("--emit %s: %w", c.Emit, err)
	case len(entries) > 0 && !c.Force:
		return &exitError{code: ExitUsage, err: fmt.Errorf("--emit %s: the directory is not empty (%d entries); files of the same name would be replaced", c.Emit, len(entries)), hint: "--force, or an empty or new directory"}
	}
	return nil
}

// modelID is what the emitted scripts pass to from_pretrained: the Hub id,
// or the local directory (not its config.json).
func modelID(rm *modelsource.Resolved) string {
	id := rm.ID
	if id == "" {
		id = rm.Name
	}
	if filepath.Base(id) == "config.json" {
		id = filepath.Dir(id)
	}
	return id
}

// emit writes the recipe of plan rank (1-based) into c.Emit and says what
// it wrote with tell.
func (c *PlanCmd) emit(plans []plan.Plan, rm *modelsource.Resolved, epochs float64, tell func(string)) error {
	rank := max(c.EmitPlan, 1)
	if rank > len(plans) {
		return usageErrorf(fmt.Sprintf("--emit-plan %d", len(plans)), "--emit-plan %d: only %d plan(s) fit", rank, len(plans))
	}
	files, err := recipe.Files(recipe.Input{ModelID: modelID(rm), Plan: plans[rank-1], Epochs: epochs})
	if err != nil {
		hint := "plan with other settings"
		if errors.Is(err, recipe.ErrUnsupported) {
			for i, p := range plans {
				if recipe.Check(recipe.Input{ModelID: modelID(rm), Plan: p, Epochs: epochs}) == nil {
					hint = fmt.Sprintf("--emit-plan %d, the first plan the stacks can run as estimated", i+1)
					break
				}
			}
		}
		return &exitError{code: ExitError, err: fmt.Errorf("plan %d: %w", rank, err), hint: hint}
	}
	if err := writeRecipe(c.Emit, files); err != nil {
		return err
	}
	tell(fmt.Sprintf("wrote plan %d's recipe to %s: %s", rank, c.Emit, strings.Join(recipe.Names(files), ", ")))
	return nil
}

// writeRecipe writes each file atomically (no reader sees half a file, a
// failure leaves no partial one) and, when a write fails, removes the files
// this call already wrote that were not there before.
func writeRecipe(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--emit %s: %w", dir, err)
	}
	var created []string
	for _, name := range recipe.Names(files) {
		path := filepath.Join(dir, name)
		_, statErr := os.Lstat(path)
		perm := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") || strings.HasSuffix(name, ".py") {
			perm = 0o755
		}
		if err := atomicfile.Write(path, files[name], perm); err != nil {
			for _, p := range created {
				os.Remove(p)
			}
			return err
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			created = append(created, path)
		}
	}
	return nil
}
