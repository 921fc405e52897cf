// Package safetensors parses the header of a safetensors file: an 8-byte
// little-endian length N followed by N bytes of JSON that map each tensor name
// to its dtype, shape and byte range in the data section, plus an optional
// "__metadata__" object of strings.
//
// It is pure: it reads bytes handed to it (or through an io.ReaderAt) and
// never the tensor data, so a caller can count the parameters of a
// multi-gigabyte checkpoint from its first few kilobytes. It refuses what
// would make those counts wrong or the parse unbounded: a header length over
// MaxHeaderLength (checked before anything is allocated), a header that is
// not a JSON object, an unknown dtype, a shape whose element count overflows,
// and data offsets that are reversed, overlap, disagree with dtype×shape,
// end past MaxDataLength (where the size a file needs would wrap) or run past
// the end of the file. Count sums with checked arithmetic and refuses a
// parameter count over 10^15 (the bound of package checked, which config.json
// counts share) rather than wrap.
package safetensors
