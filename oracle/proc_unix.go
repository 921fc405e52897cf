//go:build unix

package oracle

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts the interpreter in its own process group, so that
// the kill on a timeout reaches every process it started.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
