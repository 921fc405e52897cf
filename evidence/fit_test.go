package evidence

import (
	"bytes"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/internal/shareddata"
)

func readDev(t testing.TB) []Case {
	t.Helper()
	f, err := os.Open("dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases, err := ReadCases(f, "dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// The embedded coefficients are what `calibrate evidence/dev.jsonl` fits.
func TestEmbeddedCoefficientsReproduce(t *testing.T) {
	if testing.Short() {
		t.Skip("the fit takes a few seconds")
	}
	cal, err := Fit(readDev(t), "dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	got, want := cal.Coefficients, estimate.DefaultCoefficients
	wantRows := CoefficientRows(want)
	for i, g := range CoefficientRows(got) {
		if w := wantRows[i].Value; math.Abs(g.Value-w) > 1e-3*math.Max(1e-3, math.Abs(w)) {
			t.Errorf("%s: fit gives %v, embedded is %v; regenerate with: go run ./cmd/canifinetune calibrate evidence/dev.jsonl -o estimate/coefficients.json", g.Name, g.Value, w)
		}
	}
	for _, fp := range fitParams {
		if v := *fp.get(&got); v < fp.lower-1e-9 {
			t.Errorf("%s = %v is below its floor %v", fp.name, v, fp.lower)
		}
	}
	if len(cal.Rows) < 100 {
		t.Errorf("fitted %d rows, want the ≥ 100 usable high/medium rows", len(cal.Rows))
	}
	for _, id := range cal.Rows {
		if strings.HasPrefix(id, "hf-perf") {
			t.Errorf("row %s (an encoder) was fitted", id)
		}
	}
}

// The project's evidence copy is the shared development cohort, byte for byte.
func TestDevCohortMatchesShared(t *testing.T) {
	p := shareddata.Dir(t, "measurements", "dev.jsonl") // skips locally, fails in CI when missing
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile("dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, own) {
		t.Errorf("evidence/dev.jsonl differs from %s", p)
	}
}

// A calibration applies inside its domain and says so outside it.
func TestCalibratedDomain(t *testing.T) {
	cases := readDev(t)
	req, _, why := RequestFor(cases[0])
	if why != "" {
		t.Fatal(why)
	}
	k := estimate.DefaultCoefficients
	k.ReservedConstGiB += 10
	cal := &Calibration{Coefficients: k, Domain: Domain{ModelTypes: []string{req.Model.ModelType}, Methods: []string{string(req.Method)}, Stacks: []string{string(req.Stack)}, GPUMemGiB: [2]float64{1, 200}}}
	in, err := Calibrated{Cal: cal, File: "c.json"}.Estimate(req)
	if err != nil {
		t.Fatal(err)
	}
	base, err := estimate.Canifinetune{Coef: estimate.DefaultCoefficients}.Estimate(req)
	if err != nil {
		t.Fatal(err)
	}
	if d := in.Levels.Reserved - base.Levels.Reserved; d < 9*estimate.GiB {
		t.Errorf("inside the domain the calibration moved reserved by %d bytes, want ≈ 10 GiB", d)
	}
	cal.Domain.ModelTypes = []string{"gpt2"}
	out, err := Calibrated{Cal: cal, File: "c.json"}.Estimate(req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Levels.Reserved != base.Levels.Reserved || !strings.Contains(strings.Join(out.Assumptions, ";"), "not applied") {
		t.Errorf("outside the domain: reserved %d (default %d), assumptions %v", out.Levels.Reserved, base.Levels.Reserved, out.Assumptions)
	}
}

func TestParseCalibrationErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{`, "invalid calibration file"},
		{`{"schema_version":2}`, "field schema_version: 2"},
		{`{"schema_version":1,"estimator":"seed000"}`, "field estimator"},
		{`{"schema_version":1,"estimator":"canifinetune","domain":{}}`, "field domain"},
		{`{"schema_version":1,"estimator":"canifinetune","domain":{"model_types":["llama"],"methods":["lora"]},"coefficients":{"act_gated":-1}}`, "coefficients.act_gated: -1"},
	} {
		_, err := ParseCalibration([]byte(tt.in), "c.json")
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "c.json") {
			t.Errorf("ParseCalibration(%s) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// Simulated rows (the fake-tensor oracle's) never enter the fit: adding
// copies of the development rows marked simulated, with figures three times
// the measured ones, leaves the fitted coefficients and rows unchanged.
func TestFitLeavesOutSimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("fits twice")
	}
	dev := readDev(t)
	var b bytes.Buffer
	for _, c := range dev {
		b.WriteString(`{"id":"oracle-` + c.ID + `","model":"` + c.Model + `","method":"full","precision":"bf16-true","simulated":true,"measured":{"kind":"allocated","gib":1}}` + "\n")
	}
	sim, err := ReadCases(&b, "sim.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for i := range sim {
		if !sim[i].Simulated {
			t.Fatalf("case %s: simulated not read", sim[i].ID)
		}
		// Same configuration as the measured row, three times its figure.
		c := dev[i]
		if c.Measured.GiB == nil {
			continue
		}
		c.ID, c.Simulated = sim[i].ID, true
		g := 3 * *c.Measured.GiB
		c.Measured.GiB = &g
		sim[i] = c
	}
	want, err := Fit(dev, "dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Fit(append(slices.Clone(dev), sim...), "dev+sim.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if got.Coefficients != want.Coefficients {
		t.Errorf("simulated rows moved the fit:\n got %+v\nwant %+v", got.Coefficients, want.Coefficients)
	}
	if diff := cmp.Diff(want.Rows, got.Rows); diff != "" {
		t.Errorf("fitted rows (-measured only +with simulated):\n%s", diff)
	}
}
