// Package gpu knows the GPUs a fine-tuning run may land on and what a machine
// actually has.
//
// It provides:
//
//   - an embedded table of cards (cards.json) with memory as the driver reports
//     it in MiB (nvidia-smi memory.total, rocm-smi VRAM Total Memory), not the
//     marketing GB, each row naming where its number comes from;
//   - lookup by whole name, alias or family (Lookup, Match; a name is never
//     completed, and one several cards share is an ambiguity error listing
//     them), what a card supports (SupportsBF16, SupportsFlashAttention2),
//     and parsing of card lists such as "4xA100-80GB" or "2xH100,1x4090"
//     (ParseGPUList) and of detected indices such as "0,2" (ParseIndexList);
//   - pure readers of what nvidia-smi and rocm-smi print (ParseGPUQuery,
//     ParseAppQuery, ParseBanner, ParseROCmSMI, assembled into an Inventory by
//     NVIDIAInventory and ROCmInventory) and of the Python stack script's
//     JSON (ParseStack);
//   - Diagnose, which turns an inventory and a stack into findings a user can
//     act on; and
//   - SelectGPUs / SelectExplicit, the multi-GPU placement (Unsloth Studio's rule, docs/memory-model.md#multi-gpu-placement).
//
// It runs nothing: package gpu/probe runs the tools and the Python
// interpreter and hands their output to these readers, so that a package
// needing only the table never reaches os/exec.
//
// It refuses to guess: a card that is not in the table stays unmatched rather
// than being mapped to the nearest name, a missing Python package is absent
// rather than given a version, and a field nvidia-smi reports as [N/A] is
// unknown (-1) rather than zero. How a model is sharded across the chosen GPUs
// (DDP, FSDP, ZeRO) belongs to package estimate, not here.
package gpu
