package hub_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/canifinetune/canifinetune/internal/hub"
)

// A local checkpoint: config.json and one shard whose header names a 4×4
// BF16 weight. Only the header is read.
func ExampleLocalModel() {
	dir, _ := os.MkdirTemp("", "checkpoint")
	defer os.RemoveAll(dir)
	header := `{"w":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]}}`
	shard := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	shard = append(append(shard, header...), make([]byte, 32)...)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), shard, 0o644)

	m, err := hub.LocalModel(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Shards, m.Tensors.Parameters, m.Tensors.ByDType["BF16"].Bytes)
	// Output: [model.safetensors] 16 32
}
