"""The reference engine's tokenizer: UTF-8 bytes plus four special ids, and its chat template.

Byte-level keeps the tiny models honest (no tokenizer files to ship, every string encodable) and
makes the vocabulary small enough for checkpoints of a few MB. The chat template is the one the
training corpus (`scripts/train_reference_models.py`) was written in, so prompts built from
OpenAI-style messages look like what the models saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "ASSISTANT_PREFIX",
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "VOCAB_SIZE",
    "apply_chat_template",
    "decode",
    "encode",
]

BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
UNK_ID = 259  # reserved: never produced by `encode`, kept so the vocabulary has a round size
VOCAB_SIZE = 260
SPECIAL_TOKENS = {BOS_ID: "<bos>", EOS_ID: "<eos>", PAD_ID: "<pad>", UNK_ID: "<unk>"}

_ROLE_PREFIX = {"system": "System: ", "user": "User: ", "assistant": "Assistant: "}
ASSISTANT_PREFIX = _ROLE_PREFIX["assistant"]


def encode(text: str, *, add_bos: bool = True) -> list[int]:
    """Token ids of `text`: its UTF-8 bytes, preceded by <bos> unless `add_bos` is False."""
    ids = list(text.encode("utf-8"))
    return [BOS_ID, *ids] if add_bos else ids


def decode(ids: Iterable[int], *, skip_special: bool = True) -> str:
    """Text of `ids`; special ids are dropped (or written as their names) and bad UTF-8 is replaced."""
    out = bytearray()
    for i in ids:
        if i < 256:
            out.append(i)
        elif not skip_special:
            out += SPECIAL_TOKENS.get(i, "<unk>").encode()
    return out.decode("utf-8", errors="replace")


def apply_chat_template(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
    """The prompt text for OpenAI-style `messages` ({"role", "content"}), as the corpus writes it.

    Each turn is one line `Role: content`; with `add_generation_prompt` the text ends with
    `Assistant: ` so the model continues with the answer. Unknown roles are a ValueError.
    """
    lines: list[str] = []
    for message in messages:
        role = message.get("role", "")
        if role not in _ROLE_PREFIX:
            raise ValueError(f"unknown chat role {role!r}: expected one of {', '.join(_ROLE_PREFIX)}")
        lines.append(_ROLE_PREFIX[role] + str(message.get("content", "")) + "\n")
    text = "".join(lines)
    return text + ASSISTANT_PREFIX if add_generation_prompt else text


def main() -> None:
    """The host side of verify's /generate route (`python -m specctl.engines.reference.tokenizer`):
    a JSON list of message lists on stdin, `{"ids": [...]}` on stdout, as the reference engine's chat
    endpoint would tokenize them."""
    import json
    import sys

    requests = json.load(sys.stdin)
    print(json.dumps({"ids": [encode(apply_chat_template(messages)) for messages in requests]}))


if __name__ == "__main__":
    main()
