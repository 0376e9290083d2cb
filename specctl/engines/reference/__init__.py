"""The reference engine: a CPU rehearsal of SGLang's EAGLE-3 speculative decoding.

A small Llama-style target and an EAGLE-3 drafter in torch (`model`), greedy chain drafting with
verification and the same per-request counters as sglang 0.5.23 (`speculate`), a byte-level
tokenizer with the chat template of the shipped corpus (`tokenizer`), and the HTTP server around
them. The drafter captures the target layers that sglang's Llama convention would capture for its
config, so a drafter served with the wrong layers really loses acceptance.

This is the only package that imports torch; it does so in its submodules, never here, so that
importing `specctl.engines.reference` stays light.
"""
