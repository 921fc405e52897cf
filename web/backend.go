package web

import (
	"context"
	"io"

	"github.com/canifinetune/canifinetune/trace"
)

// Backend is the command line's own work behind the plan, doctor and trace
// views. Package cli provides it (serve passes cli.WebBackend): web cannot
// import cli, which imports web, and these answers must be the CLI's, byte
// for byte, errors included. A nil field turns its routes off (501).
type Backend struct {
	// Plan runs `canifinetune plan --json` with args (flags as
	// --name=value, the model last) and returns what it printed and its
	// exit code. The server checks args first: a catalog model, GPUs from
	// the table (no detection), known flags only.
	Plan func(args []string) (stdout, stderr []byte, code int)
	// Recipe runs `canifinetune plan --emit DIR --emit-plan rank` with
	// the same args and returns the files it wrote (name → contents), what
	// it printed on stderr and its exit code.
	Recipe func(args []string, rank int) (files map[string][]byte, stderr []byte, code int)
	// Doctor returns the document of `doctor --json` for this machine's
	// GPUs, probed within a timeout; the Python stack is not probed (it
	// imports torch, which takes too long for a page).
	Doctor func(ctx context.Context) ([]byte, error)
	// Trace analyses one Kineto trace read from r, plain or gzipped, as
	// `canifinetune trace` does, with opts (the page sets OnGap for its
	// histogram); name is what messages and the report call it.
	Trace func(ctx context.Context, name string, r io.Reader, opts trace.Options) (*trace.Report, error)
}
