"""The reference engine: a CPU rehearsal of SGLang's EAGLE-3 speculative decoding.

A small Llama-style target and an EAGLE-3 drafter in torch (`model`), batched greedy chain drafting
with verification and the same per-request counters as sglang 0.5.23 (`speculate`), continuous
batching in one scheduler thread (`scheduler`), a byte-level tokenizer with the chat template of
the shipped corpus (`tokenizer`), sglang's HTTP API with its event streams on FastAPI (`api`) and
the launcher that serves it on uvicorn (`server`). The drafter captures the target layers that
sglang's Llama convention would capture for its config, so a drafter served with the wrong layers
really loses acceptance.

This is the only package that imports torch; it does so in its submodules, never here, so that
importing `specctl.engines.reference` stays light.
"""
