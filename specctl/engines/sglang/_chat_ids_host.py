"""Run on a host by verify, with the engine's Python and the release's environment: the token ids
sglang's chat endpoint would build for each request of the workload.

For sglang releases whose chat endpoint returns no `meta_info` (before 0.5.13), verify sends these
ids to the native /generate instead, so the speculative counters come back. sglang's chat serving
renders messages with the tokenizer's own chat template (add_generation_prompt) and tokenizes the
result, so the same call on the same files gives the same ids.

argv: TOKENIZER_PATH REVISION ("" for none) TRUST_REMOTE_CODE ("1"/"0"); stdin: a JSON list of
message lists. Prints one JSON object: {"ids": [[...], ...]} or {"error": "..."}. Standard library
plus the transformers that sglang itself depends on.
"""

import json
import sys


def main() -> None:
    path, revision, trust = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "1"
    requests = json.load(sys.stdin)
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision, trust_remote_code=trust)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {path} has no chat template (sglang's chat endpoint would refuse too)")
        ids = []
        for messages in requests:
            rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if hasattr(rendered, "keys"):  # transformers 5 answers a BatchEncoding
                rendered = rendered["input_ids"]
            ids.append([int(i) for i in rendered])
    except Exception as exc:  # noqa: BLE001 - every failure is an answer: verify says what went wrong on which host
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    print(json.dumps({"ids": ids}))


if __name__ == "__main__":
    main()
