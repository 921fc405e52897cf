// Package hub finds the facts canifinetune needs about a model — its
// config.json and the safetensors header of every weight shard — on the
// Hugging Face Hub, in a huggingface_hub cache, or in a local checkpoint
// directory, without ever reading the weights themselves.
//
// Over HTTP it reads only each shard's header, with Range requests; it
// follows the huggingface_hub conventions (HF_ENDPOINT, HF_TOKEN,
// HF_TOKEN_PATH, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE) and the cache layout
// (models--org--name/refs, snapshots, blobs, .no_exist), so a cache filled by
// transformers works offline and what this package fetches is reusable. The
// shard headers, which no huggingface_hub file holds, are kept under
// snapshots/<commit>/.canifinetune/headers/.
//
// It refuses to leak the token: the token travels only in the Authorization
// header, only to the endpoint's own scheme and host (never to the CDN a
// download redirects to), and is redacted from every error and from the
// token's own formatting. Failures the user can act on wrap a sentinel
// (ErrGated, ErrUnauthorized, ErrNotFound, ErrRateLimited, ErrOffline) and
// carry a hint that says what to do next. Requests have bounded timeouts and
// a bounded number of retries.
//
// It refuses answers that could steer a write: the X-Repo-Commit and ETag
// headers become cache paths, so a commit that is not a 40-hex hash or an
// ETag that is a path is an error naming the header, and a shard's header is
// checked against the file size the answer must state. Text from the Hub is
// shown with its control characters escaped. Temporary files a killed run
// left in the cache are removed by a later online run once they are old.
package hub
