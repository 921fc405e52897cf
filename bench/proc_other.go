//go:build !unix

package bench

import (
	"os"
	"os/exec"
)

func setProcessGroup(*exec.Cmd) {}

// interruptGroup interrupts the probe; where there are no process groups
// (Windows), Interrupt may be unsupported and the probe is killed instead.
func interruptGroup(cmd *exec.Cmd) error {
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		return cmd.Process.Kill()
	}
	return nil
}

func killGroup(*exec.Cmd) {}
