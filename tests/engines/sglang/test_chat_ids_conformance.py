"""Verify's /generate route for sglang versions whose chat endpoint returns no meta_info: the host
command renders the workload with the model's own tokenizer as sglang's chat serving does
(`apply_chat_template(messages, add_generation_prompt=True, tokenize=True)`), here with the real
transformers of the sglang environment and a tokenizer built for the test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specctl.engines import get_engine

pytestmark = pytest.mark.conformance

# a word-level tokenizer whose chat template marks roles, saved with transformers' own save_pretrained
BUILD = r"""
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = ["<unk>", "<s>", "<|user|>", "<|assistant|>", "<|system|>", "hello", "there", "be", "brief"]
core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>")
if sys.argv[2] == "1":
    tok.chat_template = ("{{ bos_token }}{% for m in messages %} <|{{ m['role'] }}|> {{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %} <|assistant|>{% endif %}")
tok.save_pretrained(sys.argv[1])
"""
REQUESTS = [
    [{"role": "user", "content": "hello there"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
]
# <s>=1 <|user|>=2 <|assistant|>=3 <|system|>=4 hello=5 there=6 be=7 brief=8
EXPECTED = [[1, 2, 5, 6, 3], [1, 4, 7, 8, 2, 5, 3]]


def _tokenizer(python: str, where: Path, *, template: bool) -> Path:
    subprocess.run(
        [python, "-c", BUILD, str(where), "1" if template else "0"], check=True, capture_output=True, timeout=120
    )
    return where


def _render(python: str, model: Path) -> dict[str, object]:
    argv = [python, "-m", "sglang.launch_server", "--model-path", str(model), "--port", "30000"]
    command = get_engine("sglang").chat_ids_command(python, argv)
    done = subprocess.run(command, input=json.dumps(REQUESTS), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def test_the_workload_becomes_the_ids_sglangs_chat_endpoint_would_build(sglang_python: str, tmp_path: Path) -> None:
    model = _tokenizer(sglang_python, tmp_path / "tok", template=True)
    assert _render(sglang_python, model) == {"ids": EXPECTED}


def test_a_tokenizer_without_a_chat_template_is_an_answer_not_a_crash(sglang_python: str, tmp_path: Path) -> None:
    model = _tokenizer(sglang_python, tmp_path / "tok", template=False)
    answer = _render(sglang_python, model)
    assert "ids" not in answer and "no chat template" in str(answer["error"])
