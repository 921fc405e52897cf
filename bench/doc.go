// Package bench runs the measurement that settles an estimate: a bounded
// training probe on the user's own GPU, and the receipt it always leaves.
//
// The probe is probe.py, embedded in the binary. Run writes it and a JSON
// configuration (ProbeConfig) to a temporary directory and runs it with the
// user's Python. The probe trains the configuration with the stock
// transformers / PEFT / bitsandbytes code paths on synthetic tokens of exactly
// seq_len × batch for a bounded number of optimizer updates, and reports what
// torch's caching allocator saw. Its result travels back in a file the Go side
// names (--result) and, as a fallback, on the last stdout line prefixed by
// "CANIFINETUNE_PROBE_RESULT ": a probe killed between writing and renaming its
// file, or one whose libraries print on stdout, is still read.
//
// Run always writes a receipt, atomically (a temporary file in the target
// directory, synced, then renamed): on success, on a CUDA out-of-memory error
// (status oom, with the stage it hit), on a missing module, a crash (the tail
// of stderr is kept), output it cannot read, a timeout, and an interrupt
// (Ctrl-C, or SIGTERM from timeout, Slurm or docker stop): the probe's process
// group gets SIGINT and a grace period to report what it measured, then is
// killed, and the temporary directory is removed. The receipt's directory is
// checked for a writable file before the probe starts (atomicfile.CheckOutput).
//
// # Receipt schema (schema_version 1)
//
// docs/receipt-json.md documents every field; in short:
//
//	schema_version     1
//	id                 bench-<UTC time>-<model>-<method>-s<seq>-b<batch>-<config hash>; the case id
//	tool               {name, version}
//	status             success | oom | configuration_error | dependency_error | runtime_error |
//	                   interrupted | not_run
//	signal             the signal that interrupted the run (SIGINT, SIGTERM), when status is interrupted
//	stage              setup | load | forward | backward | optimizer | done: the last stage reached
//	error, error_type  what failed; missing_module for dependency_error; stderr_tail for crashes
//	started_at, finished_at, duration_s, python
//	config             ProbeConfig as asked: model, random_init, method, targets, rank, alpha,
//	                   precision, quant {scheme, double_quant}, optimizer, attn, grad_ckpt,
//	                   seq_len, batch, updates, grad_accum, device, trace
//	effective          what was built: model_type, vocab_size, attn_implementation, autocast,
//	                   targets after PEFT's expansion, lora_alpha, num_parameters,
//	                   trainable_parameters, trainable_dtypes, param_dtypes, tokens_per_update
//	gpu                {index, name, driver, capability, total_bytes, total_gb}
//	software           {python, torch, cuda, transformers, peft, bitsandbytes, accelerate}
//	estimate           the estimate made before the run: {estimator, version, kind, total_bytes,
//	                   total_gb, components: [{name, bytes, gb}]}; absent when none was made
//	completed_updates  optimizer updates that finished
//	measured           peak_allocated (max_memory_allocated), peak_reserved (max_memory_reserved),
//	                   peak_active (active_bytes.all.peak), after_load_*, load_peak_*,
//	                   free_before/free_after (mem_get_info), device_total, at_failure_*;
//	                   each as *_bytes and *_gb (GiB, 2^30 bytes)
//	timing             load_s, mean_step_s, tokens_per_s (the first update is left out of the
//	                   mean when more ran: it pays for kernel selection and allocator warm-up)
//	updates            per update: step_s, tokens, tokens_per_s, loss, and that update's own
//	                   peak_allocated/reserved/active (the counters are reset before each)
//	optimizer          {class, states: [{dtype, tensors, bytes, gb}], state_bytes, state_gb}:
//	                   the state tensors as actually allocated
//	trace              the torch.profiler chrome trace, when asked for
//
// A measured field that is not known is absent, never zero. On an oom receipt
// the peaks cover only what ran before the failure: a lower bound, not the
// peak the setting needs. A three-update probe is bounded evidence.
//
// ToCase turns a success or oom receipt into a measured case of
// docs/measurements-schema.md (kind reserved; an oom becomes oom=true with
// gib null), which `canifinetune bench --to-case RECEIPT` prints as one JSON
// line for validate and calibrate.
//
// Package bench does not estimate: the estimate recorded before a run comes
// from an Estimator the caller supplies.
package bench
