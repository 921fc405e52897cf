// Package catalog provides the embedded model catalog: Hugging Face
// config.json files of popular models, each with its provenance, the ids
// that resolve to it, and a parameter count where a source states one.
//
// Every file was copied from a public copy of the real config.json or
// written from values a named source states (models/SOURCES.md says which,
// per file); none was typed from memory. Entry.Verbatim tells the two apart.
//
// The package does not parse shapes (that is hfconfig's job) and never
// touches the network: a model that is not here is not found.
package catalog
