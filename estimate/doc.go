// Package estimate is the memory model of a fine-tuning step: from a parsed
// model shape and a training configuration to the bytes each component of the
// step's GPU footprint takes, the peak each measurement kind should show
// (allocated, reserved, process), and a feasibility verdict.
//
// It is pure: plain structs in, plain structs out. Several estimators live
// here side by side, selectable by name: "seed000" reproduces the reference
// memory model of shared/seeds/000 exactly, "unsloth" reproduces Unsloth
// Studio's estimator (seed 001), and "canifinetune" (the default) is the
// evidence-fitted model that diverges from seed000 where measurements say so.
// All sizes are bytes; GiB (2^30) only on output.
package estimate
