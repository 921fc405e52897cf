// Package oracle runs the fake-tensor oracle (fakestep.py, embedded in the
// binary with its driver simulate.py) on one training request with a Python
// that has torch, transformers and peft: the model is built on meta tensors
// and two training steps run without a GPU, and the peak of live tensor bytes
// per phase comes back (Simulation). It is what `canifinetune estimate
// --simulate` calls.
//
// Run writes the scripts, the request and the model's config.json to a
// temporary directory, runs the interpreter in its own process group under a
// timeout (the whole group is killed when it passes), and reads the one
// result line simulate.py prints. What went wrong is an *Error whose Kind
// says whether the interpreter could not start, a library is missing, the
// oracle refuses the request, the run failed, or it timed out.
//
// PinnedVenv and DefaultPython find the interpreter: the environment that
// scripts/python-env.sh creates for the embedded requirements.lock, keyed by
// the lock's hash, before python3 on the PATH.
package oracle
