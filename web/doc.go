// Package web is the local web page of canifinetune (`canifinetune serve`):
// the calculator form, server-rendered with html/template from embedded
// assets, the plan, doctor and trace views, and a JSON API (/api/estimate,
// /api/models, /api/gpus, /api/search, /api/config, /api/plan, /api/doctor,
// /api/trace) over the
// same library calls and the same documents as the command line. The
// plan, doctor and trace answers come from the command line's own code
// through Backend (package cli provides it).
//
// It serves the embedded model catalog and GPU table, and, given a Hub
// (Options.Hub), the Hub models the catalog lacks and a model search; an
// uploaded config.json is parsed and kept in memory. It reads no local file
// a request names and never sends the page a Hugging Face token; the only
// program it runs is the GPU probe of /doctor, bounded by a timeout and one
// at a time. Uploaded traces are streamed through the analysis, bounded in
// size and time, and not stored.
// The handler refuses Host headers other than the loopback names of its
// own port (DNS rebinding) unless it is told the server is remote on
// purpose, refuses cross-site POSTs, and bounds request bodies;
// NewHTTPServer adds the read, write and idle timeouts.
package web
