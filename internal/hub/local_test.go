package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/canifinetune/canifinetune/internal/safetensors"
)

func writeDir(t *testing.T, files map[string][]byte) string {
	dir := t.TempDir()
	for name, b := range files {
		must(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	return dir
}

func TestLocalModel(t *testing.T) {
	files := twoShardRepo().files
	dir := writeDir(t, files)
	m, err := LocalModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := summary{ID: dir, Config: string(testConfig), Tensors: twoShardCounts, TotalSize: 2*shardData + 2048,
		Shards: []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}}
	if diff := cmp.Diff(want, summarize(m)); diff != "" {
		t.Errorf("with index (-want +got):\n%s", diff)
	}

	// Without an index: every *.safetensors.
	delete(files, "model.safetensors.index.json")
	dir = writeDir(t, files)
	m, err = LocalModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	want.ID, want.TotalSize = dir, 0
	if diff := cmp.Diff(want, summarize(m)); diff != "" {
		t.Errorf("without index (-want +got):\n%s", diff)
	}
}

func TestLocalModelBnb4bit(t *testing.T) {
	shard := makeShard(
		tensorSpec{"q.weight", "U8", []uint64{2048, 1}, 1},
		tensorSpec{"q.weight.absmax", "F32", []uint64{64}, 4},
		tensorSpec{"q.weight.quant_map", "F32", []uint64{16}, 4},
		tensorSpec{"q.weight.quant_state.bitsandbytes__nf4", "U8", []uint64{120}, 1},
		tensorSpec{"norm.weight", "BF16", []uint64{64}, 2},
	)
	dir := writeDir(t, map[string][]byte{"config.json": testConfig, "model.safetensors": shard})
	m, err := LocalModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tensors.Parameters != 4096+64 || m.Tensors.Packed4Bit.StoredBytes != 2048 {
		t.Errorf("Parameters %d, packed bytes %d; want %d, 2048", m.Tensors.Parameters, m.Tensors.Packed4Bit.StoredBytes, 4096+64)
	}
	if m.Tensors.ByDType[safetensors.BF16].Elements != 64 {
		t.Errorf("ByDType = %v", m.Tensors.ByDType)
	}
}

func TestLocalModelRefuses(t *testing.T) {
	files := twoShardRepo().files
	noConfig := map[string][]byte{"model.safetensors": files["model-00001-of-00002.safetensors"]}
	if _, err := LocalModel(writeDir(t, noConfig)); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("no config.json: err = %v", err)
	}
	missingShard := map[string][]byte{"config.json": testConfig, "model.safetensors.index.json": files["model.safetensors.index.json"],
		"model-00001-of-00002.safetensors": files["model-00001-of-00002.safetensors"]}
	if _, err := LocalModel(writeDir(t, missingShard)); err == nil || !strings.Contains(err.Error(), "model-00002-of-00002") {
		t.Errorf("missing shard: err = %v", err)
	}
	s := files["model-00001-of-00002.safetensors"]
	truncated := map[string][]byte{"config.json": testConfig, "model.safetensors": s[:len(s)-1]}
	if _, err := LocalModel(writeDir(t, truncated)); !errors.Is(err, safetensors.ErrTruncated) {
		t.Errorf("truncated shard: err = %v, want ErrTruncated", err)
	}
	binOnly := map[string][]byte{"config.json": testConfig, "pytorch_model.bin": []byte("x")}
	m, err := LocalModel(writeDir(t, binOnly))
	if err != nil || m.Tensors != nil || len(m.Warnings) != 1 {
		t.Errorf("no safetensors: %v, %+v", err, m)
	}
}
