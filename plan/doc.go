// Package plan searches the training configurations that fit a model on a
// set of GPUs and ranks them by how long the run would take.
//
// A Space names the levers the search may move — method (full, LoRA,
// QLoRA), sequence length up to the requested one, micro-batch × gradient
// accumulation at the same effective batch, activation checkpointing, a
// fused loss kernel, an 8-bit optimizer, data-parallel strategies with and
// without CPU offload over 1..N GPUs and nodes — and Search estimates every
// combination with the memory model's numbers-only path, keeps those whose
// verdict is yes, and ranks them (see Compare). Maximize answers the largest
// sequence, batch or rank that fits by bisection.
//
// Time is a model, not a measurement: FLOPs per token from the model's
// shape (flops.go) divided by the GPU's dense 16-bit peak times a
// model-FLOPs utilisation (MFU), plus data-parallel communication over the
// interconnect (time.go). The MFU per GPU class (mfu.go) is fitted on the
// measured throughput cohort; QLoRA's dequantization is memory traffic at
// the card's bandwidth (flops.go).
//
// The package is pure: it takes requests, GPU figures and an estimator, and
// returns plans; it reads no files and runs nothing. It refuses nothing the
// estimator accepts; a candidate the estimator refuses is skipped.
package plan
