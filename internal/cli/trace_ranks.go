package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/canifinetune/canifinetune/trace"
)

// rankFiles lists the traces --ranks names: the files ending .json or
// .json.gz in a directory, or the matches of a glob, in name order.
func rankFiles(arg string) ([]string, error) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		ents, err := os.ReadDir(arg)
		if err != nil {
			return nil, fmt.Errorf("--ranks: %w", err)
		}
		var out []string
		for _, e := range ents {
			n := e.Name()
			if e.Type().IsRegular() && (strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".json.gz")) {
				out = append(out, filepath.Join(arg, n))
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("--ranks: no .json or .json.gz files in directory %s", arg)
		}
		return out, nil
	}
	out, err := filepath.Glob(arg)
	if err != nil {
		return nil, usageErrorf("canifinetune trace --ranks 'run/rank*.json.gz'", "--ranks %q: %v", arg, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--ranks %s: no such directory, and no file matches it as a glob", arg)
	}
	slices.Sort(out)
	return out, nil
}

// runRanks analyses the traces of one run one file at a time and compares
// the ranks.
func (c *TraceCmd) runRanks(env *Env) error {
	if len(c.Files) > 0 || len(c.WhatIf) > 0 {
		return usageErrorf("canifinetune trace --ranks DIR", "--ranks takes no trace files and no --what-if")
	}
	if c.Straggler < 0 {
		return usageErrorf("canifinetune trace --ranks DIR --straggler-threshold 0.1", "--straggler-threshold must be ≥ 0, got %g", c.Straggler)
	}
	files, err := rankFiles(c.Ranks)
	if err != nil {
		return err
	}
	if len(files) > 1<<15 {
		return fmt.Errorf("--ranks: %d files; at most %d ranks", len(files), 1<<15)
	}
	if env.Getenv == nil || env.Getenv("GOMEMLIMIT") == "" {
		defer setTraceMemoryLimit()()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The collective records spill to their own directory, kept until the
	// end; each rank's analysis has its own, removed when it returns.
	collScratch := &traceScratch{ctx: ctx}
	defer collScratch.remove()
	rs := trace.NewRanks(trace.Options{Scratch: collScratch})
	defer rs.Close()
	for _, f := range files {
		rep, err := analyzeTraceFile(ctx, f, nil, rs.Options(trace.Options{AllSteps: c.AllSteps, KernelWaitBelowNS: c.KernelWait.Nanoseconds()}), "")
		if err != nil {
			return err
		}
		rs.Add(f, rep)
	}
	rr, err := rs.Report(c.Straggler)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(env.Stdout, rr)
	}
	writeRankReport(&controlEscaper{w: env.Stdout}, rr)
	return nil
}

func writeRankReport(out io.Writer, r *trace.RankReport) {
	fmt.Fprintf(out, "%d ranks; median typical step %s\n", len(r.Ranks), fmtNS(r.MedianStepNS))
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tsource\ttypical step\tvs median\tbusy\tcommunication\tcomm beside compute\tcollective wait\t")
	for _, x := range r.Ranks {
		mark := ""
		if x.Straggler {
			mark = "straggler"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%+.1f%%\t%s\t%s\t%s\t%s of %s\t%s\n", x.Rank, x.Source, fmtNS(x.StepNS), 100*x.StepVsMedian, fmtNS(x.BusyNS),
			fmtNS(x.CommunicationNS), tracePct(x.CommCompOverlap), fmtNS(x.CollectiveWaitNS), fmtNS(x.CollectiveNS), mark)
	}
	tw.Flush()
	if len(r.Stragglers) == 0 {
		fmt.Fprintf(out, "no straggler: no rank's typical step is more than %s over the median\n", tracePct(r.StragglerThreshold))
	} else {
		ids := make([]string, len(r.Stragglers))
		for i, s := range r.Stragglers {
			ids[i] = fmt.Sprint(s)
		}
		fmt.Fprintf(out, "stragglers (typical step more than %s over the median): rank %s\n", tracePct(r.StragglerThreshold), strings.Join(ids, ", "))
	}
	fmt.Fprintf(out, "collectives compared: %d (the n-th communication kernel of every rank; wait = time beyond the fastest rank's)\n", r.Collectives.Matched)
	if len(r.Steps) > 0 {
		fmt.Fprintln(out, "\nsteps (host span)")
		tw = tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "step\tranks\tmedian\tslowest\tslowest rank")
		for _, s := range r.Steps {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\n", s.Number, s.Ranks, fmtNS(s.MedianNS), fmtNS(s.SlowestNS), s.SlowestRank)
		}
		tw.Flush()
	}
	if len(r.Flags) > 0 {
		fmt.Fprintln(out, "\nreliability flags:")
		for _, f := range r.Flags {
			fmt.Fprintf(out, "  %s: %s\n    affects: %s\n", f.Code, f.Detail, f.BlastRadius)
		}
	}
}
