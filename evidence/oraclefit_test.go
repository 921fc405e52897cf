package evidence

import (
	"math"
	"os"
	"slices"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// The default estimator held to the fake-tensor oracle: on the simulated
// rows of model types whose layer the estimator spells out tensor by tensor
// (transformers without autocast: hfExactTypes), the
// allocated-level error per model type has median ≤ 1 %, p90 ≤ 3 % and worst
// ≤ 6 %, on the grid and the study set together. Rows of other types (fitted
// shape) are scored by validate, not here.
func TestOracleGridHeld(t *testing.T) {
	var cases []Case
	for _, name := range []string{"oracle.jsonl", "oracle-study.jsonl"} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := ReadCases(f, name)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, cs...)
	}
	exact := []string{"llama", "mistral", "qwen2", "gemma", "qwen3", "gemma2", "phi3", "granite", "olmo2", "stablelm"}
	def, _ := estimate.ByName("")
	errs := map[string][]float64{}
	for _, c := range cases {
		if !c.Simulated || c.Arch == nil || !slices.Contains(exact, *c.Arch) || c.Measured.GiB == nil {
			continue
		}
		p := Predict(def, c)
		if p.Estimate == nil {
			t.Errorf("%s: unsupported: %s", c.ID, p.Unsupported)
			continue
		}
		got := float64(p.Predicted(c.Measured.Kind)) / estimate.GiB
		errs[*c.Arch] = append(errs[*c.Arch], 100*(got-*c.Measured.GiB) / *c.Measured.GiB)
	}
	if len(errs) == 0 {
		t.Fatal("no simulated rows of the spelled-out model types")
	}
	for arch, e := range errs {
		abs := make([]float64, len(e))
		for i, v := range e {
			abs[i] = math.Abs(v)
		}
		slices.Sort(abs)
		med, p90, worst := abs[len(abs)/2], abs[int(math.Ceil(0.9*float64(len(abs))))-1], abs[len(abs)-1]
		t.Logf("%s: %d rows, median |err| %.2f %%, p90 %.2f %%, worst %.2f %%", arch, len(abs), med, p90, worst)
		if med > 1 || p90 > 3 || worst > 6 {
			t.Errorf("%s: oracle error median %.2f %%, p90 %.2f %%, worst %.2f %%; want ≤ 1, 3, 6", arch, med, p90, worst)
		}
	}
}
