//go:build !unix

package oracle

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

// killGroup kills the interpreter; where there are no process groups
// (Windows) its children are not reached.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}
