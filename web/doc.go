// Package web is the local web page of canifinetune (`canifinetune serve`):
// the calculator form, server-rendered with html/template from embedded
// assets, and a JSON API (/api/estimate, /api/models, /api/gpus) over the
// same library calls and the same documents (package report) as the
// command line.
//
// It serves the embedded model catalog and GPU table only: it reads no
// local file a request names, reaches no network, runs no GPU probe, and
// never reads a Hugging Face token. The handler refuses Host headers other
// than the loopback names of its own port (DNS rebinding) unless it is
// told the server is remote on purpose, refuses cross-site POSTs, and
// bounds request bodies; NewHTTPServer adds the read, write and idle
// timeouts.
package web
