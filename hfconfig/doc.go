// Package hfconfig parses a Hugging Face config.json into the shapes the memory
// model needs: every Linear module of every decoder layer (with its name as the
// model names it, so LoRA target lists resolve), embeddings, norms, MoE experts,
// and the exact parameter count those shapes imply.
//
// It is pure: it takes bytes and returns a Model. BERT and RoBERTa encoders
// parse with Model.Encoder set; other encoder-only and encoder-decoder models
// (deberta-v2, modernbert, t5, …) are refused with ErrUnsupported, and an unknown
// model_type gets a clearly labelled generic decoder fallback only when the
// config carries the standard Llama-style fields; its Model.Generic is set so
// callers lower their confidence. It never returns a silently wrong number:
// a missing or malformed required field is an error naming the field and value
// (a missing vocab_size also wraps ErrNoVocab; ParseWith takes it instead).
package hfconfig
