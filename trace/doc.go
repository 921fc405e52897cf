// Package trace accounts for where a training step's GPU time goes, from a
// PyTorch profiler (Kineto) Chrome-trace JSON.
package trace
