package evidence

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/canifinetune/canifinetune/estimate"
)

// histogramFiles are the measured length histograms a case can name
// (seq_len_dist.histogram): each file is in estimate.ParseLengths' format
// and says in its header where its counts come from.
//
//go:embed lengths/*.txt
var histogramFiles embed.FS

// keptHistogram is one embedded histogram, read once: its distribution
// and its header's "# Summary:" line.
type keptHistogram struct {
	name, summary string
	dist          estimate.LengthDist
}

// keptHistograms are the embedded histograms, in name order. A file that
// does not parse is a build defect (TestKeptHistograms reads them all).
var keptHistograms = func() []keptHistogram {
	entries, _ := histogramFiles.ReadDir("lengths") // embedded: cannot fail
	var hs []keptHistogram
	for _, e := range entries {
		file := path.Join("lengths", e.Name())
		data, _ := histogramFiles.ReadFile(file)
		d, err := estimate.ParseLengths(bytes.NewReader(data), "evidence/"+file)
		if err != nil {
			panic(err) // embedded
		}
		h := keptHistogram{name: strings.TrimSuffix(e.Name(), ".txt"), dist: d}
		for _, line := range strings.Split(string(data), "\n") {
			if s, ok := strings.CutPrefix(line, "# Summary: "); ok {
				h.summary = strings.TrimSpace(s)
				break
			}
		}
		hs = append(hs, h)
	}
	return hs
}()

// Histograms lists the names of the kept length histograms.
func Histograms() []string {
	names := make([]string, len(keptHistograms))
	for i, h := range keptHistograms {
		names[i] = h.name
	}
	return names
}

// HistogramSummary is the kept histogram's one-line description ("" for a
// name the project does not keep).
func HistogramSummary(name string) string {
	for _, h := range keptHistograms {
		if h.name == name {
			return h.summary
		}
	}
	return ""
}

// Histogram is the named kept histogram's distribution (Histograms).
func Histogram(name string) (estimate.LengthDist, error) {
	for _, h := range keptHistograms {
		if h.name == name {
			return h.dist, nil
		}
	}
	return estimate.LengthDist{}, fmt.Errorf("histogram %q: want one the project keeps (%s)", name, strings.Join(Histograms(), ", "))
}

// Lengths is the estimator's length distribution for the case: the named
// histogram, else the stated median (log-normal up to the longest sample),
// or mean and standard deviation (log-normal over the stated range), cut
// at seq_len the way OverMax says.
func (d SeqLenDist) Lengths(seqLen *int) (estimate.LengthDist, error) {
	lo, hi := int64(1), int64(0)
	if d.Min != nil {
		lo = int64(*d.Min)
	}
	if d.Max != nil {
		hi = int64(*d.Max)
	}
	if seqLen != nil && (hi == 0 || d.OverMax == "") {
		hi = max(hi, int64(*seqLen))
	}
	var dist estimate.LengthDist
	var err error
	finite := func(p *float64) bool { return p != nil && !math.IsNaN(*p) && !math.IsInf(*p, 0) }
	switch {
	case d.OverMax != "" && d.OverMax != "drop" && d.OverMax != "truncate":
		return dist, fmt.Errorf("over_max %q (want drop or truncate)", d.OverMax)
	case d.Histogram != "" && (d.P50 != nil || d.Mean != nil || d.Std != nil || d.Min != nil || d.Max != nil):
		var also []string
		for _, f := range []struct {
			set  bool
			name string
		}{{d.P50 != nil, "p50"}, {d.Mean != nil, "mean"}, {d.Std != nil, "std"}, {d.Min != nil, "min"}, {d.Max != nil, "max"}} {
			if f.set {
				also = append(also, f.name)
			}
		}
		return dist, fmt.Errorf("histogram %q with %s: the histogram gives the lengths, give it alone", d.Histogram, strings.Join(also, ", "))
	case d.Histogram != "" && d.OverMax == "":
		return dist, fmt.Errorf("histogram %q without over_max: say whether samples longer than seq_len are dropped or truncated", d.Histogram)
	case d.Histogram != "":
		dist, err = Histogram(d.Histogram)
	case hi < 1:
		return dist, errors.New("no max and no seq_len: the longest sample is unknown")
	case finite(d.Mean) && finite(d.Std):
		dist, err = estimate.LengthsMeanStd(*d.Mean, *d.Std, lo, hi)
	case finite(d.P50):
		dist, err = estimate.LengthsMedianMax(int64(math.Round(*d.P50)), hi)
	default:
		return dist, errors.New("neither p50 nor mean with std")
	}
	if err != nil {
		return dist, err
	}
	if seqLen != nil {
		if d.OverMax == "drop" && dist.Q[0] > int64(*seqLen) {
			return dist, fmt.Errorf("over_max drop with seq_len %d: every sample is longer (the shortest is %d tokens), so none would train", *seqLen, dist.Q[0])
		}
		dist = dist.Truncate(int64(*seqLen), d.OverMax == "drop")
	}
	return dist, nil
}

// statedLengths are what cases state about their lengths only in their
// notes (the shared cohort is kept byte for byte): each entry applies to a
// case whose notes contain every one of its strings, and gives a length
// distribution (for a case without seq_len_dist), or says that the first
// micro-batch holds the longest sample (for a case without longest_first),
// or that the measured active or allocated peak is one logged step's (for a
// case without step_peaks).
//
//go:embed lengths.json
var statedLengthsJSON []byte

type statedLength struct {
	NotesContain []string `json:"notes_contain"`
	// Archs, when set, limits the entry to cases of these architectures:
	// lengths counted with one model's tokenizer set the longest batch of
	// another's only as far as their tokenizers agree, and one with a
	// smaller vocabulary counts more tokens (an estimate made with fewer
	// would err low).
	Archs        []string    `json:"archs,omitempty"`
	Dist         *SeqLenDist `json:"seq_len_dist,omitempty"`
	LongestFirst bool        `json:"longest_first,omitempty"`
	StepPeaks    bool        `json:"step_peaks,omitempty"`
	// Source says where the notes' claim comes from (a distribution
	// carries its own).
	Source string `json:"source,omitempty"`
}

var statedLengths = func() []statedLength {
	var xs []statedLength
	if err := json.Unmarshal(statedLengthsJSON, &xs); err != nil {
		panic("evidence/lengths.json: " + err.Error()) // embedded; a test reads it
	}
	return xs
}()

// statedCase is what a case says of its lengths and of what its figure
// spans, from its own fields or from its notes (statedLengthsOf).
type statedCase struct {
	// Dist is the sample-length distribution (nil: only the bound).
	Dist *SeqLenDist
	// LongestFirst: the first micro-batch holds the longest sample.
	LongestFirst bool
	// StepPeaks: the measured active or allocated peak is one logged
	// step's, not the run's (Case.StepPeaks).
	StepPeaks bool
}

// statedLengthsOf is what the case says of its lengths: its own
// seq_len_dist, longest_first and step_peaks, else what the entries of
// statedLengths whose strings its notes all contain state (one scan of the
// notes).
func statedLengthsOf(c Case) statedCase {
	st := statedCase{Dist: c.SeqLenDist}
	if c.LongestFirst != nil {
		st.LongestFirst = *c.LongestFirst
	}
	if c.StepPeaks != nil {
		st.StepPeaks = *c.StepPeaks
	}
	for _, s := range statedLengths {
		all := len(s.NotesContain) > 0
		for _, sub := range s.NotesContain {
			all = all && strings.Contains(c.Notes, sub)
		}
		if !all || (len(s.Archs) > 0 && (c.Arch == nil || !slices.Contains(s.Archs, *c.Arch))) {
			continue
		}
		if st.Dist == nil && s.Dist != nil {
			d := *s.Dist
			st.Dist = &d
		}
		if c.LongestFirst == nil && s.LongestFirst {
			st.LongestFirst = true
		}
		if c.StepPeaks == nil && s.StepPeaks {
			st.StepPeaks = true
		}
	}
	return st
}
