// Package cli turns command-line flags into requests for the pure packages
// (estimate, hfconfig, gpu, trace, evidence, …) and formats their results as
// terminal tables or stable JSON. It is the only place, with the adapters it
// calls, that touches files, processes, the network and the clock.
package cli
