package cli

import (
	"github.com/alecthomas/kong"
)

// HelpCmd is `canifinetune help [command]`: the same text as `--help`, for
// users who reach for the go-command style first.
type HelpCmd struct {
	Command []string `arg:"" optional:"" help:"The command to explain; none for the list of commands."`
}

// Run prints the help of the named command by parsing it with --help, so the
// text is the one `canifinetune <command> --help` prints.
func (c *HelpCmd) Run(env *Env, k *kong.Kong) error {
	if _, err := k.Parse(append(append([]string(nil), c.Command...), "--help")); err != nil {
		return usageErrorf("canifinetune --help", "help: %v", err)
	}
	return nil
}
