// Command canifinetune tells whether a fine-tuning run fits on a GPU, what to
// change when it does not, and, after a run, how far off the estimate was.
package main

import (
	"os"

	"github.com/canifinetune/canifinetune/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.OSEnv()))
}
