package trace

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readPublic reads a file of testdata/public (see PROVENANCE.md there),
// gunzipping it when its name ends in .gz.
func readPublic(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/public/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(name, ".gz") {
		return b
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPublicTraceCategories pins the category table of public traces
// reviewed by eye in docs/trace-review.md: Σdur per category. Each figure
// was worked out from the trace without this package: Σdur per GPU op name
// with Python's json module, and each name's category given by a person
// (the review table):
//
//   - kineto_tb_plugin_gpu_metrics_input.json (PyTorch 1.8 era): the 4
//     kernels launched by host ops inside Optimizer.step#SGD.step (host ops
//     on the step's thread starting inside it, then kernels by their
//     "external id") last 1 µs each: optimizer 4 µs, taken from
//     elementwise (their name is ATen's AddFunctor kernel). Before the
//     legacy spellings were read, optimizer was 0 and elementwise 26 µs.
//   - hta_simple_add_a100_2streams.json.gz (AlexNet forward, A100): gemm is
//     ampere_sgemm 2,673 + cudnn scudnn 2,068 + sm80_xmma implicit GEMM
//     1,806 + gcgemm 646 + fft2d 295 + 133 + 126 + cuBLAS epilogue 38 +
//     cask_cudnn offsets 8 µs; elementwise 953 + 686 + nchwToNhwc 275 +
//     73 + 32; reduction_norm max_pool 646 + adaptive_average_pool 270;
//     memcpy_memset 39,080 + 8. Nothing is other.
//   - hta_event_sync_3streams.json.gz: three ampere_sgemm kernels and
//     three memsets.
func TestPublicTraceCategories(t *testing.T) {
	for _, c := range []struct {
		file string
		want map[string]int64
	}{
		{"kineto_tb_plugin_gpu_metrics_input.json", map[string]int64{
			"gemm": 13000, "elementwise": 22000, "reduction_norm": 9000, "optimizer": 4000, "memcpy_memset": 2000}},
		{"hta_simple_add_a100_2streams.json.gz", map[string]int64{
			"gemm": 7793000, "elementwise": 2019000, "reduction_norm": 916000, "memcpy_memset": 39088000}},
		{"hta_event_sync_3streams.json.gz", map[string]int64{"gemm": 369000, "memcpy_memset": 3000}},
	} {
		t.Run(c.file, func(t *testing.T) {
			r, err := Analyze(bytes.NewReader(readPublic(t, c.file)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Devices) != 1 {
				t.Fatalf("%d devices, want 1", len(r.Devices))
			}
			got := map[string]int64{}
			for _, cat := range r.Devices[0].Categories {
				if cat.SumDurNS != 0 {
					got[cat.Name] = cat.SumDurNS
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("category Σdur ns (-want +got):\n%s", diff)
			}
		})
	}
}
