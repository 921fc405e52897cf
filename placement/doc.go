// Package placement decides how a fine-tuning run uses several GPUs and
// judges it there: the model-parallel placement of a run too large for one
// GPU (accelerate's device_map across the GPUs with the most free memory),
// the per-GPU view of a data-parallel run (world size, shard group, host
// memory for CPU offload, communication buffers), and the search for
// changes that make a run fit on the GPUs it has (estimate.Changes judged
// by the placement).
//
// It computes; it does not detect GPUs, read files or print. The GPUs come
// in as gpu.Device values (detected by the caller, or the cards a --gpus
// list names), and the results are plain structs a CLI or a web page
// renders.
package placement
