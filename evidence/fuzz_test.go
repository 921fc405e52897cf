package evidence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/canifinetune/canifinetune/estimate"
)

// FuzzCaseLine feeds one cohort line through the loader, RequestFor, every
// estimator and the scorer: each step either refuses it or gives finite,
// non-negative figures that a JSON report can hold. Never a panic.
func FuzzCaseLine(f *testing.F) {
	if fh, err := os.Open("dev.jsonl"); err == nil {
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for i := 0; sc.Scan() && i < 24; i++ {
			f.Add(sc.Text())
		}
		fh.Close()
	}
	lora := `{"id":"a","model":"Qwen/Qwen2.5-0.5B","method":"lora","precision":"bf16-true","lora":{"rank":8,"alpha":16,"targets":["q_proj","v_proj"]},"seq_len":1024,"batch":2,"framework":"hf-trainer","gpu":{"name":null,"count":1,"vram_gib":24},"sharding":{"strategy":"none","cpu_offload":"none"},"measured":{"kind":"reserved","gib":3.5,"oom":false}}`
	f.Add(lora)
	f.Add(strings.Replace(lora, `"rank":8`, `"rank":1099511627776`, 1))
	f.Add(strings.Replace(lora, `"gib":3.5`, `"gib":1e-308`, 1))
	f.Add(strings.Replace(lora, `"vram_gib":24`, `"vram_gib":1e308`, 1))
	f.Add(strings.Replace(lora, `"seq_len":1024`, `"seq_len":16777216`, 1))
	f.Add(strings.Replace(lora, `"strategy":"none","cpu_offload":"none"`, `"strategy":"ddp","cpu_offload":"optimizer"`, 1))
	ests := []estimate.Estimator{}
	for _, n := range estimate.Names() {
		e, _ := estimate.ByName(n)
		ests = append(ests, e)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cases, err := ReadCases(strings.NewReader(line), "fuzz.jsonl")
		if err != nil {
			return
		}
		for _, c := range cases {
			for _, est := range ests {
				p := Predict(est, c)
				if e := p.Estimate; e != nil {
					for _, comp := range e.Components {
						if comp.Bytes < 0 {
							t.Fatalf("%s: %s = %d", est.Name(), comp.Name, comp.Bytes)
						}
					}
					if e.Total < 0 || e.Levels.Allocated < 0 || e.Levels.Reserved < 0 || e.Levels.Process < 0 {
						t.Fatalf("%s: negative figures %d %+v", est.Name(), e.Total, e.Levels)
					}
					if r := e.Verdict.Ratio; math.IsNaN(r) || math.IsInf(r, 0) {
						t.Fatalf("%s: ratio %v", est.Name(), r)
					}
				}
				r := ScoreCase(c, p)
				if r.ErrorPct != nil && (math.IsNaN(*r.ErrorPct) || math.IsInf(*r.ErrorPct, 0)) {
					t.Fatalf("%s: error %v %%", est.Name(), *r.ErrorPct)
				}
				if _, err := json.Marshal(r); err != nil {
					t.Fatalf("%s: the report cannot be written: %v", est.Name(), err)
				}
			}
		}
	})
}

// A measurement too small for a finite error is refused by ReadCases; a
// Case built in code that carries one is reported unsupported, not as an
// infinite error a JSON report cannot hold.
func TestScoreCaseNonFiniteError(t *testing.T) {
	tiny := 1e-308
	c := Case{ID: "tiny", Model: "Qwen/Qwen2.5-0.5B", Method: "full", Precision: "bf16-true", SeqLen: ptrInt(512), Batch: ptrInt(1),
		Framework: "hf-trainer", Measured: Measured{Kind: KindReserved, GiB: &tiny}}
	r := ScoreCase(c, Predict(estimate.PhasePeak{Coef: estimate.DefaultCoefficients}, c))
	if r.Status != StatusUnsupported || r.ErrorPct != nil {
		t.Fatalf("status %s, error %v; want unsupported with no error figure", r.Status, r.ErrorPct)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

func ptrInt(v int) *int { return &v }

// What Fit returns, ParseCalibration accepts: a cohort whose rows name no
// card gave a domain of [+Inf, 0] GiB, which JSON cannot encode.
func TestFitWithoutCardsRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("fits coefficients")
	}
	fh, err := os.Open("dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	cases, err := ReadCases(fh, "dev.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var some []Case
	for _, c := range cases {
		if c.Method == "lora" && c.Sharding.Strategy == "none" && len(some) < 30 {
			c.GPU = GPU{}
			some = append(some, c)
		}
	}
	cal, err := Fit(some, "no cards")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cal)
	if err != nil {
		t.Fatalf("calibration cannot be written: %v", err)
	}
	if _, err := ParseCalibration(b, "cal.json"); err != nil {
		t.Fatalf("calibrate wrote what its loader refuses: %v", err)
	}
}

// FuzzReadThroughput: any input either reads or fails with an error that
// wraps ErrInvalidThroughputCase or names the read; never a panic, and
// every case it accepts validates again.
func FuzzReadThroughput(f *testing.F) {
	f.Add([]byte(goodThroughputRow))
	f.Add([]byte(goodThroughputRow + "\n" + goodThroughputRow))
	f.Add([]byte(`{"id":"x","measured":{"tokens_per_sec":1e400}}`))
	f.Add([]byte(strings.Replace(goodThroughputRow, `"lora":null`, `"lora":{"rank":-1,"targets":[]}`, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := ReadThroughput(bytes.NewReader(b), "fuzz")
		if err != nil {
			// A bytes.Reader never fails, so every refusal is of the input.
			if !errors.Is(err, ErrInvalidThroughputCase) {
				t.Fatalf("error %v does not wrap ErrInvalidThroughputCase", err)
			}
			return
		}
		for _, c := range cs {
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted case fails validation: %v", err)
			}
			if v := *c.Measured.TokensPerSec; !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("accepted speed %v", v)
			}
		}
	})
}
