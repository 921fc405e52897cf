package trace

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// DefaultStragglerThreshold is the default RankReport straggler threshold:
// a rank whose typical step is more than 10% longer than the median rank's.
const DefaultStragglerThreshold = 0.10

// Ranks puts together the traces of one multi-rank run (one file per rank),
// analysed one at a time so that memory is what one analysis needs plus a
// few figures per rank and step. For each rank: call Options to get the
// options for its Analyze, then Add with the report. Report then compares
// the ranks. The communication kernels of every rank are kept as 16-byte
// records in a sort that spills to Options.Scratch like the analysis's own.
type Ranks struct {
	colls *sorter[collRec]
	ranks []rankSummary
	done  bool
}

// rankSummary is what is kept of one rank's report.
type rankSummary struct {
	row   RankRow
	steps map[int64]int64 // host span by step number
}

// NewRanks returns an empty set of ranks whose collective records spill to
// opts.Scratch in buffers of opts.BufferBytes.
func NewRanks(opts Options) *Ranks {
	return &Ranks{colls: newSorter(collCodec, collBySeq, opts.Scratch, opts.smallBuffer())}
}

// Options returns opts set to send the communication kernels of the next
// rank's analysis to r.
func (r *Ranks) Options(opts Options) Options {
	opts.collect = &rankCollector{rank: int16(len(r.ranks)), s: r.colls}
	return opts
}

// Add records the report of the rank last analysed with r.Options; name is
// the file it came from.
func (r *Ranks) Add(name string, rep *Report) {
	pos := len(r.ranks)
	row := RankRow{Rank: pos, Source: name, Devices: len(rep.Devices), Flags: len(rep.Flags)}
	if rep.Rank != nil {
		row.Rank = *rep.Rank
	}
	s := rankSummary{steps: map[int64]int64{}}
	var commUnion, commComp int64
	for i, d := range rep.Devices {
		row.BusyNS += d.BusyNS
		row.SpanNS = max(row.SpanNS, d.SpanNS)
		for _, c := range d.Categories {
			if c.Name == CatCommunication.String() {
				row.CommunicationNS += c.ExclusiveNS
				if c.UnionNS != nil {
					commUnion += *c.UnionNS
				}
			}
		}
		commComp += d.CommCompOverlapNS
		if i == 0 {
			row.StepNS = d.Steps.Typical.SpanNS
			row.Step = d.Steps.Typical.Step
			row.StepBusyNS = d.Steps.Typical.BusyNS
			for _, st := range d.Steps.Steps {
				if st.Number >= 0 {
					s.steps[st.Number] = st.SpanNS
				}
			}
		}
	}
	row.CommCompOverlap = traceShare(commComp, commUnion)
	s.row = row
	r.ranks = append(r.ranks, s)
}

// Close releases the collective records; Report calls it.
func (r *Ranks) Close() error {
	r.done = true
	return r.colls.close()
}

// Report compares the ranks added so far. threshold is the straggler
// threshold (0.1: a typical step 10% longer than the median rank's).
func (r *Ranks) Report(threshold float64) (_ *RankReport, err error) {
	if r.done {
		return nil, errors.New("ranks already reported")
	}
	defer func() { err = errors.Join(err, r.Close()) }()
	out := &RankReport{SchemaVersion: SchemaVersion, StragglerThreshold: threshold, Ranks: []RankRow{},
		Steps: []RankStep{}, Stragglers: []int{}, Flags: []Flag{}}
	n := len(r.ranks)
	if n == 0 {
		return out, nil
	}
	if err := r.collectiveWaits(out); err != nil {
		return nil, err
	}
	// Stragglers: the typical step against the median rank's (lower median).
	var withSteps []int64
	for _, s := range r.ranks {
		if s.row.StepNS > 0 {
			withSteps = append(withSteps, s.row.StepNS)
		}
	}
	if len(withSteps) > 0 {
		slices.Sort(withSteps)
		out.MedianStepNS = withSteps[(len(withSteps)-1)/2]
	}
	for i := range r.ranks {
		row := &r.ranks[i].row
		if out.MedianStepNS > 0 && row.StepNS > 0 {
			row.StepVsMedian = float64(row.StepNS)/float64(out.MedianStepNS) - 1
			if row.StepVsMedian > threshold {
				row.Straggler = true
				out.Stragglers = append(out.Stragglers, row.Rank)
			}
		}
		out.Ranks = append(out.Ranks, *row)
	}
	// Per step number: every rank's span and the slowest.
	numbers := map[int64]bool{}
	for _, s := range r.ranks {
		for k := range s.steps {
			numbers[k] = true
		}
	}
	for _, k := range slices.Sorted(mapKeys(numbers)) {
		st := RankStep{Number: k, SpanNS: make([]*int64, n)}
		var spans []int64
		for i, s := range r.ranks {
			v, ok := s.steps[k]
			if !ok {
				continue
			}
			st.SpanNS[i] = &v
			spans = append(spans, v)
			if st.Ranks == 0 || v > st.SlowestNS {
				st.SlowestRank, st.SlowestNS = s.row.Rank, v
			}
			st.Ranks++
		}
		slices.Sort(spans)
		st.MedianNS = spans[(len(spans)-1)/2]
		out.Steps = append(out.Steps, st)
	}
	seen := map[int]string{}
	for _, row := range out.Ranks {
		if prev, ok := seen[row.Rank]; ok {
			out.Flags = append(out.Flags, Flag{Code: "duplicate_rank", Count: 1,
				Detail:      fmt.Sprintf("%s and %s both say rank %d", prev, row.Source, row.Rank),
				BlastRadius: "the two files may be the same rank twice: per-step maxima, medians and collective waits mix them"})
		}
		seen[row.Rank] = row.Source
	}
	return out, nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// collectiveWaits reads the communication kernels of all ranks grouped by
// (device position, sequence number): the n-th communication kernel (in
// start order) of every rank is taken to be the same collective. A rank's
// wait on it is its duration minus the fastest rank's; collectives that
// not every rank has are counted, not compared.
func (r *Ranks) collectiveWaits(out *RankReport) error {
	sorted, err := r.colls.finish()
	if err != nil {
		return fmt.Errorf("sort collectives: %w", err)
	}
	defer sorted.close()
	n := len(r.ranks)
	group := make([]collRec, 0, n)
	flush := func() {
		if len(group) == 0 {
			return
		}
		defer func() { group = group[:0] }()
		if len(group) != n {
			out.Collectives.Unmatched++
			return
		}
		fastest := group[0].Dur
		for _, c := range group[1:] {
			fastest = min(fastest, c.Dur)
		}
		out.Collectives.Matched++
		for _, c := range group {
			row := &r.ranks[c.Rank].row
			row.Collectives++
			row.CollectiveNS += c.Dur
			row.CollectiveWaitNS += c.Dur - fastest
		}
	}
	it := sorted.iter()
	var c collRec
	for it.next(&c) {
		if len(group) > 0 && (group[0].DevPos != c.DevPos || group[0].Seq != c.Seq) {
			flush()
		}
		group = append(group, c)
	}
	flush()
	if it.err != nil {
		return fmt.Errorf("read collectives: %w", it.err)
	}
	if out.Collectives.Unmatched > 0 {
		out.Flags = append(out.Flags, Flag{Code: "collectives_unmatched", Count: out.Collectives.Unmatched,
			Detail:      fmt.Sprintf("%d communication kernels are not on every rank (the ranks recorded different numbers of them)", out.Collectives.Unmatched),
			BlastRadius: "they are left out of collective wait times; if a rank lost a kernel in the middle, the kernels after it are matched to the wrong collectives"})
	}
	return nil
}

// rankCollector receives one rank's communication kernels from the sweep.
type rankCollector struct {
	rank int16
	s    *sorter[collRec]
}

func (c *rankCollector) add(devPos int, seq uint32, dur int64) error {
	return c.s.add(collRec{Seq: seq, DevPos: int16(devPos), Rank: c.rank, Dur: dur})
}

// collRec is one communication kernel of one rank: the seq-th in start
// order on the rank's devPos-th device.
type collRec struct {
	Seq          uint32
	DevPos, Rank int16
	Dur          int64
}

// collCodec: a collRec in 16 bytes.
var collCodec = codec[collRec]{size: 16,
	put: func(b []byte, c *collRec) {
		le.PutUint32(b[0:], c.Seq)
		le.PutUint16(b[4:], uint16(c.DevPos))
		le.PutUint16(b[6:], uint16(c.Rank))
		le.PutUint64(b[8:], uint64(c.Dur))
	},
	get: func(b []byte, c *collRec) {
		c.Seq = le.Uint32(b[0:])
		c.DevPos = int16(le.Uint16(b[4:]))
		c.Rank = int16(le.Uint16(b[6:]))
		c.Dur = int64(le.Uint64(b[8:]))
	},
}

func collBySeq(a, b collRec) int {
	return cmp.Or(cmp.Compare(a.DevPos, b.DevPos), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Rank, b.Rank))
}

// RankReport compares the ranks of one run (trace --ranks).
type RankReport struct {
	SchemaVersion int       `json:"schema_version"`
	Ranks         []RankRow `json:"ranks"`
	// MedianStepNS is the median (the lower one) of the ranks' typical step spans.
	MedianStepNS       int64   `json:"median_step_ns"`
	StragglerThreshold float64 `json:"straggler_threshold"`
	// Stragglers are the ranks whose typical step exceeds MedianStepNS by
	// more than StragglerThreshold.
	Stragglers  []int           `json:"stragglers"`
	Steps       []RankStep      `json:"steps"`
	Collectives RankCollectives `json:"collectives"`
	Flags       []Flag          `json:"flags"`
}

// RankRow is one rank's figures.
type RankRow struct {
	Rank    int    `json:"rank"` // distributedInfo.rank, else the file's position
	Source  string `json:"source"`
	Devices int    `json:"devices"`
	// BusyNS sums the devices' busy time; SpanNS is the longest device span.
	BusyNS          int64 `json:"busy_ns"`
	SpanNS          int64 `json:"span_ns"`
	CommunicationNS int64 `json:"communication_ns"` // exclusive communication time
	// CommCompOverlap is the share of the communication union that ran
	// beside computation (all devices).
	CommCompOverlap float64 `json:"comm_comp_overlap"`
	// Step, StepNS and StepBusyNS are the first device's typical step.
	Step         string  `json:"step"`
	StepNS       int64   `json:"step_ns"`
	StepBusyNS   int64   `json:"step_busy_ns"`
	StepVsMedian float64 `json:"step_vs_median"` // StepNS / MedianStepNS − 1
	Straggler    bool    `json:"straggler"`
	// Collectives counts the rank's communication kernels matched on every
	// rank; CollectiveNS is their Σdur, CollectiveWaitNS the part beyond the
	// fastest rank's duration of each.
	Collectives      int   `json:"collectives"`
	CollectiveNS     int64 `json:"collective_ns"`
	CollectiveWaitNS int64 `json:"collective_wait_ns"`
	Flags            int   `json:"flags"` // reliability flags in the rank's own report
}

// RankStep is one step number across the ranks.
type RankStep struct {
	Number int64 `json:"number"`
	Ranks  int   `json:"ranks"` // ranks that have the step
	// SpanNS is each rank's host span of the step, in Ranks order; null
	// where a rank lacks it.
	SpanNS      []*int64 `json:"span_ns"`
	MedianNS    int64    `json:"median_ns"`
	SlowestRank int      `json:"slowest_rank"`
	SlowestNS   int64    `json:"slowest_ns"`
}

// RankCollectives counts the collectives compared across ranks.
type RankCollectives struct {
	Matched   int64 `json:"matched"`
	Unmatched int64 `json:"unmatched"`
}
