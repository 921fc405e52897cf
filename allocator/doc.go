// Package allocator models PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp): how a sequence of tensor allocations
// and frees turns into reserved device memory. It replays an alloc/free trace
// and reports the allocated and reserved levels, their peaks and the
// fragmentation (reserved bytes that no live tensor uses).
//
// It models the rules that set the reserved level: sizes rounded up to
// 512 B; a small pool (requests ≤ 1 MiB) served from 2 MiB segments and a
// large pool whose requests under 10 MiB are served from 20 MiB segments and
// larger ones from segments rounded up to 2 MiB; best fit (the smallest free
// block that holds the request, lowest address first); splitting a large
// block only when more than 1 MiB would remain (512 B in the small pool);
// max_split_size_mb; merging a freed block with free neighbours of its own
// segment; releasing whole free segments and retrying when the device is
// full; and expandable_segments, where each pool is one segment that grows in
// 2 MiB (small) or 20 MiB (large) pages.
//
// It refuses what it does not model: streams and events (every block belongs
// to one stream), CUDA-graph private pools, roundup_power2_divisions and the
// garbage-collection threshold. It is pure: no I/O, no clock.
package allocator
