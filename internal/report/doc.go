// Package report builds the documents the estimate, models and gpus commands
// print with --json, and the words of a request error, so that the command
// line and the web server (package web) say the same thing in the same
// schema: the CLI renders them as tables or JSON, the server as JSON or a
// page. It computes nothing itself; it refuses nothing but what the
// library refuses.
package report
