// Package estimate is the memory model of a fine-tuning step: from a parsed
// model shape and a training configuration to the bytes each component of the
// step's GPU footprint takes, the peak each measurement kind should show
// (allocated, reserved, process), and a feasibility verdict.
//
// It is pure: plain structs in, plain structs out. Several estimators live
// here side by side, selectable by name: "seed000" (alias "reference") sums
// the components of the reference memory model of docs/memory-model.md term
// by term, "unsloth" reproduces Unsloth Studio's estimator (its
// studio/backend/utils/hardware/VRAM_ESTIMATION.md), and "canifinetune" (the
// default) is the phase-peak model fitted on measured runs, which diverges
// from the reference where measurements say so.
// All sizes are bytes; GiB (2^30) only on output.
package estimate
