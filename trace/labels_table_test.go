package trace

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
)

// kernelLabel is one row of testdata/kernel_labels.tsv: a real kernel name
// and the category a person gave it.
type kernelLabel struct {
	name, category, family, source string
	kind                           OpKind
	line                           int
}

func readKernelLabels(t *testing.T) []kernelLabel {
	t.Helper()
	f, err := os.Open("testdata/kernel_labels.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []kernelLabel
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		cols := strings.Split(s, "\t")
		if len(cols) != 5 {
			t.Fatalf("kernel_labels.tsv:%d: %d columns, want 5", line, len(cols))
		}
		r := kernelLabel{name: cols[0], category: cols[1], family: cols[3], source: cols[4], line: line}
		switch cols[2] {
		case "kernel":
			r.kind = KindKernel
		case "memcpy":
			r.kind = KindMemcpy
		case "memset":
			r.kind = KindMemset
		default:
			t.Fatalf("kernel_labels.tsv:%d: kind %q", line, cols[2])
		}
		if _, err := ParseCategory(r.category); err != nil {
			t.Fatalf("kernel_labels.tsv:%d: %v", line, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestKernelLabels checks Categorize against every row of the labelled
// table of real kernel names.
func TestKernelLabels(t *testing.T) {
	rows := readKernelLabels(t)
	if len(rows) < 80 {
		t.Fatalf("only %d labelled names", len(rows))
	}
	wrong := 0
	for _, r := range rows {
		if got := Categorize(r.kind, r.name).String(); got != r.category {
			wrong++
			t.Errorf("kernel_labels.tsv:%d (%s): Categorize(%.100q) = %s, want %s", r.line, r.family, r.name, got, r.category)
		}
	}
	t.Logf("%d of %d labelled kernel names categorised as labelled (%.1f%%)", len(rows)-wrong, len(rows), 100*float64(len(rows)-wrong)/float64(len(rows)))
}

// TestKernelLabelsAreVerbatim: every row whose source is one of the traces
// copied into testdata names a GPU op that trace really has, so the table
// cannot drift into invented names.
func TestKernelLabelsAreVerbatim(t *testing.T) {
	local := map[string]string{
		"tests/data/nccl_parser_config/nccl_data.json.gz":                             "hta_nccl_data_2streams_3steps.json.gz",
		"tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": "hta_ns_resolution_rank0_5steps.json.gz",
		"tests/data/trace_filter/sampled_rank-0.json.gz":                              "hta_sampled_rank0_4streams_2steps.json.gz",
	}
	names := map[string]map[string]bool{}
	checked := 0
	for _, r := range readKernelLabels(t) {
		_, upstream, ok := strings.Cut(r.source, ":")
		file, isLocal := local[upstream]
		if !ok || !isLocal {
			continue
		}
		if names[file] == nil {
			names[file] = opNames(t, file)
		}
		if !names[file][r.name] {
			t.Errorf("kernel_labels.tsv:%d: %.80q is not a GPU op name in %s", r.line, r.name, file)
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("only %d rows checked against the copied traces", checked)
	}
}

func opNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	tr, err := Parse(bytes.NewReader(gunzipTestdata(t, file)))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	m := map[string]bool{}
	for _, o := range tr.Ops {
		m[tr.Names[o.Name]] = true
	}
	return m
}
