// Package archtest holds the tests that keep the repository's shape: which
// packages may touch the outside world, and that ARCHITECTURE.md names every
// package. It has no code of its own.
package archtest
