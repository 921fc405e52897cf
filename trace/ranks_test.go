package trace

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rankTrace is one rank of a two-rank run: four steps of stepUS µs each
// starting at 1000, and in each step one GEMM of gemmUS µs followed by an
// all-reduce of ncclUS[k] µs.
func rankTrace(rank int, stepUS int, gemmUS int, ncclUS []int) string {
	var ev []string
	corr := 1
	for k := range 4 {
		start := 1000 + k*stepUS
		ev = append(ev, fmt.Sprintf(`{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 10, "tid": 11, "ts": %d, "dur": %d}`, k+1, start, stepUS))
		ev = append(ev, launch(fmt.Sprint(start+1), "0.5", corr), kernel("ampere_sgemm_128x64_nn", 7, fmt.Sprint(start+2), fmt.Sprint(gemmUS), corr))
		corr++
		ev = append(ev, launch(fmt.Sprint(start+2), "0.5", corr), kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 8, fmt.Sprint(start+2+gemmUS), fmt.Sprint(ncclUS[k]), corr))
		corr++
	}
	return strings.Replace(traceJSON(ev...), `{"schemaVersion": 1,`, fmt.Sprintf(`{"schemaVersion": 1, "distributedInfo": {"rank": %d},`, rank), 1)
}

// TestRanks: rank 1 is the straggler: its steps take 120 µs against rank
// 0's 100 (20% over the median, the lower one, 100 µs, above the 10%
// threshold). Its GEMMs are slower (60 µs against 40), so rank 0 waits in
// the all-reduce: rank 0's all-reduces take 30, 25, 30, 30 µs, rank 1's
// 10, 10, 12, 10; the fastest of each collective is rank 1's, so rank 0
// waits 20 + 15 + 18 + 20 = 73 µs and rank 1 none.
func TestRanks(t *testing.T) {
	files := []string{
		rankTrace(0, 100, 40, []int{30, 25, 30, 30}),
		rankTrace(1, 120, 60, []int{10, 10, 12, 10}),
	}
	for _, opts := range []Options{{}, {Scratch: MemScratch{}, BufferBytes: 1}} {
		rs := NewRanks(opts)
		for i, f := range files {
			rep, err := Analyze(strings.NewReader(f), rs.Options(opts))
			if err != nil {
				t.Fatal(err)
			}
			rs.Add(fmt.Sprintf("rank%d.json", i), rep)
		}
		got, err := rs.Report(DefaultStragglerThreshold)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int{1}, got.Stragglers); diff != "" {
			t.Errorf("stragglers (-want +got):\n%s", diff)
		}
		if got.MedianStepNS != 100000 {
			t.Errorf("median step = %d, want 100000", got.MedianStepNS)
		}
		type rankFigures struct {
			Rank                     int
			StepNS                   int64
			StepVsMedian             float64
			Straggler                bool
			Collectives              int
			CollectiveNS, CollWaitNS int64
		}
		var rows []rankFigures
		for _, r := range got.Ranks {
			rows = append(rows, rankFigures{r.Rank, r.StepNS, r.StepVsMedian, r.Straggler, r.Collectives, r.CollectiveNS, r.CollectiveWaitNS})
		}
		// Typical step: steps 2 and 3 are typical; the median by span is step 2.
		want := []rankFigures{
			{Rank: 0, StepNS: 100000, StepVsMedian: 0, Collectives: 4, CollectiveNS: 115000, CollWaitNS: 73000},
			{Rank: 1, StepNS: 120000, StepVsMedian: 0.2, Straggler: true, Collectives: 4, CollectiveNS: 42000, CollWaitNS: 0},
		}
		if diff := cmp.Diff(want, rows, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
			t.Errorf("ranks (-want +got):\n%s", diff)
		}
		if got.Collectives != (RankCollectives{Matched: 4}) {
			t.Errorf("collectives = %+v", got.Collectives)
		}
		if len(got.Steps) != 4 {
			t.Fatalf("steps = %d, want 4", len(got.Steps))
		}
		for _, s := range got.Steps {
			if s.SlowestRank != 1 || s.SlowestNS != 120000 || s.MedianNS != 100000 || s.Ranks != 2 {
				t.Errorf("step %d: slowest rank %d (%d ns), median %d, ranks %d; want 1, 120000, 100000, 2",
					s.Number, s.SlowestRank, s.SlowestNS, s.MedianNS, s.Ranks)
			}
		}
		if len(got.Flags) != 0 {
			t.Errorf("flags = %v", got.Flags)
		}
	}
}

// TestRanksUnmatched: a rank with one all-reduce fewer leaves the last
// collective unmatched and flagged; the first three are still compared.
func TestRanksUnmatched(t *testing.T) {
	short := rankTrace(1, 100, 40, []int{10, 10, 10, 10})
	// Drop the last all-reduce kernel of rank 1.
	i := strings.LastIndex(short, `{"ph": "X", "cat": "kernel", "name": "ncclKernel`)
	j := strings.Index(short[i:], "}}") + i + 2
	short = short[:i] + `{"ph": "M", "name": "x"}` + short[j:]
	rs := NewRanks(Options{})
	for i, f := range []string{rankTrace(0, 100, 40, []int{30, 30, 30, 30}), short} {
		rep, err := Analyze(strings.NewReader(f), rs.Options(Options{}))
		if err != nil {
			t.Fatal(err)
		}
		rs.Add(fmt.Sprint(i), rep)
	}
	got, err := rs.Report(0.1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Collectives != (RankCollectives{Matched: 3, Unmatched: 1}) || len(got.Flags) != 1 || got.Flags[0].Code != "collectives_unmatched" {
		t.Errorf("collectives %+v, flags %v", got.Collectives, flagCodesOf(got.Flags))
	}
	if got.Ranks[0].CollectiveWaitNS != 60000 {
		t.Errorf("rank 0 wait = %d, want 3 × 20 µs", got.Ranks[0].CollectiveWaitNS)
	}
	if _, err := rs.Report(0.1); err == nil {
		t.Error("a second Report succeeded")
	}
}

func flagCodesOf(fs []Flag) []string {
	var cs []string
	for _, f := range fs {
		cs = append(cs, f.Code)
	}
	return cs
}
