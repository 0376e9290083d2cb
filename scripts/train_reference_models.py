"""Train the reference engine's tiny target and its EAGLE-3 drafter, reproducibly, on the CPU.

    .venv/bin/python scripts/train_reference_models.py            # writes specctl/engines/reference/models/ and the chat-small workload

1. A synthetic chat corpus in the reference chat template: questions over a fixed table of invented
   countries, counting, lists, spelling, repetition, small sums, with optional system prompts and
   earlier turns. Its answers are deterministic given the question, so a small model can learn them
   and a drafter can predict them.
2. The target (Llama-style, 6 layers, hidden 128) learns the corpus; weights are saved in bfloat16.
3. The drafter is distilled from the SAVED target: the residual streams at the training capture
   positions (outputs of layers 1, 3 and 4 = positions 2, 4, 5) and the target's greedy next tokens
   are the inputs and labels. EAGLE-3 style: row i reads (embedding of token i+1, fc(features at i))
   and predicts the target's greedy token i+2; "training-time test" unrolls the drafter on its own
   hidden state for a few more steps so chained drafts stay accurate.
4. The drafter config names its layers with sglang 0.5.23's Llama ids (position - 1), checked against
   specctl's convention table; a DrafterManifest and a held-out prompt set (same generators, no
   training prompt) are written beside it.

Same seed, same bytes on one machine (single-threaded torch, fixed shuffles).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.engines.reference.model import (  # noqa: E402
    DrafterConfig,
    Eagle3Drafter,
    LlamaConfig,
    TargetModel,
    load_target,
    save_checkpoint,
)
from specctl.engines.reference.tokenizer import (  # noqa: E402
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    apply_chat_template,
    encode,
)
from specctl.engines.sglang import capture as capture_table  # noqa: E402

TARGET_DIR = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama"
DRAFTER_DIR = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama-eagle3"
MANIFEST = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama-eagle3.manifest.yaml"
WORKLOAD = ROOT / "specctl" / "verdict" / "workloads" / "chat-small.jsonl"

TARGET_CONFIG = LlamaConfig(
    hidden_size=128, intermediate_size=384, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=VOCAB_SIZE, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=512,
    torch_dtype="bfloat16", bos_token_id=BOS_ID, eos_token_id=EOS_ID,
)
TRAIN_LAYERS = (1, 3, 4)  # canonical: outputs of decoder layers 1, 3 and 4 = capture positions 2, 4, 5
DRAFT_VOCAB = 128
SGLANG_VERSION = "0.5.23"
MAX_LEN = 256
WORKLOAD_SIZE = 32

Messages = list[dict[str, str]]

# --- the corpus --------------------------------------------------------------------------------------

_SYLLABLES = ["ka", "lo", "mi", "ra", "ven", "to", "sel", "dor", "na", "bri", "quo", "tan", "el", "vis", "mor", "zu"]
_LANGUAGES = ["Kelvish", "Moran", "Toric", "Selan", "Briquo", "Nadese", "Vistan", "Elmoric"]
_ANIMALS = ["fox", "owl", "heron", "lynx", "otter", "falcon", "badger", "stag", "hare", "crane"]
_COLORS = ["red", "blue", "green", "gold", "white", "black", "purple", "orange"]
_LISTS = {
    "fruits": ["apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "pear", "plum"],
    "colors": ["red", "orange", "yellow", "green", "blue", "indigo", "violet"],
    "animals": ["cat", "dog", "horse", "rabbit", "sheep", "goat", "mouse", "tiger", "zebra"],
    "days of the week": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "months": ["January", "February", "March", "April", "May", "June", "July", "August", "September"],
    "planets": ["Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"],
}
_WORDS = ["garden", "window", "river", "pencil", "planet", "silver", "candle", "forest", "rocket", "butter",
          "market", "yellow", "spring", "bottle", "castle", "ticket", "winter", "summer", "dragon", "island"]
_PHRASES = ["hello world", "good morning", "see you soon", "thank you", "happy birthday", "well done",
            "keep going", "nice to meet you", "have a good day", "the sky is blue"]
_SYSTEMS = ["You are a helpful assistant.", "Answer briefly.", "You are a friendly tutor."]


def _name(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(syllables)).capitalize()


def fact_table(rng: random.Random, count: int = 24) -> list[dict[str, str]]:
    """Invented countries with a capital, language, national animal and two flag colours."""
    names: set[str] = set()
    rows = []
    while len(rows) < count:
        country = _name(rng, 3)
        capital = _name(rng, 2)
        if country in names or capital in names:
            continue
        names |= {country, capital}
        colors = rng.sample(_COLORS, 2)
        rows.append({"country": country, "capital": capital, "language": rng.choice(_LANGUAGES),
                     "animal": rng.choice(_ANIMALS), "color1": colors[0], "color2": colors[1]})
    return rows


def _fact(rng: random.Random, facts: list[dict[str, str]]) -> tuple[str, str]:
    f = rng.choice(facts)
    c = f["country"]
    kind = rng.randrange(5)
    if kind == 0:
        q = rng.choice([f"What is the capital of {c}?", f"Which city is the capital of {c}?"])
        return q, f"The capital of {c} is {f['capital']}."
    if kind == 1:
        q = rng.choice([f"Which language is spoken in {c}?", f"What do people speak in {c}?"])
        return q, f"People in {c} speak {f['language']}."
    if kind == 2:
        return f"What is the national animal of {c}?", f"The national animal of {c} is the {f['animal']}."
    if kind == 3:
        return f"What color is the flag of {c}?", f"The flag of {c} is {f['color1']} and {f['color2']}."
    q = rng.choice([f"Tell me about {c}.", f"Describe {c}."])
    return q, (f"{c} is a country. Its capital is {f['capital']}, people there speak {f['language']}, "
               f"and its national animal is the {f['animal']}.")


def _count(rng: random.Random) -> tuple[str, str]:
    a = rng.randrange(0, 40)
    b = a + rng.randrange(3, 16)
    if rng.random() < 0.7:
        return f"Count from {a} to {b}.", "Sure! " + ", ".join(str(i) for i in range(a, b + 1)) + "."
    return f"Count down from {b} to {a}.", "Sure! " + ", ".join(str(i) for i in range(b, a - 1, -1)) + "."


def _list(rng: random.Random) -> tuple[str, str]:
    category = rng.choice(sorted(_LISTS))
    items = _LISTS[category]
    n = rng.randrange(3, len(items) + 1)
    lines = "\n".join(f"{i + 1}. {item}" for i, item in enumerate(items[:n]))
    return f"List {n} {category}.", f"Here are {n} {category}:\n{lines}"


def _spell(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(_WORDS)
    return f'Spell the word "{w}".', f"Sure! {w} is spelled {'-'.join(w)}."


def _repeat(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(_WORDS)
    n = rng.randrange(2, 9)
    return f'Repeat the word "{w}" {n} times.', " ".join([w] * n)


def _sum(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randrange(0, 20), rng.randrange(0, 20)
    return f"What is {a} plus {b}?", f"{a} plus {b} equals {a + b}."


def _upper(rng: random.Random) -> tuple[str, str]:
    p = rng.choice(_PHRASES)
    return f'Write "{p}" in capital letters.', f"{p.upper()}"


def _alphabet(rng: random.Random) -> tuple[str, str]:
    a = rng.randrange(0, 16)
    b = a + rng.randrange(4, 11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return f"Say the alphabet from {letters[a]} to {letters[b]}.", " ".join(letters[a:b + 1])


def make_generators(facts: list[dict[str, str]]) -> list[tuple[float, Callable[[random.Random], tuple[str, str]]]]:
    return [(3.0, lambda r: _fact(r, facts)), (2.0, _count), (1.5, _list), (1.0, _spell), (1.0, _repeat),
            (1.0, _sum), (0.7, _upper), (0.8, _alphabet)]


def sample_dialogue(rng: random.Random, generators: list[tuple[float, Callable[[random.Random], tuple[str, str]]]]) -> tuple[Messages, str]:
    """Messages ending with a user turn, and the assistant's answer to it."""
    weights = [w for w, _ in generators]
    messages: Messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(_SYSTEMS)})
    for _ in range(rng.choice([0, 0, 0, 1])):
        q, a = rng.choices(generators, weights)[0][1](rng)
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    q, a = rng.choices(generators, weights)[0][1](rng)
    messages.append({"role": "user", "content": q})
    return messages, a


def tokens_of(messages: Messages, answer: str) -> list[int]:
    return encode(apply_chat_template(messages)) + encode(answer, add_bos=False) + [EOS_ID]


def build_corpus(seed: int, samples: int) -> tuple[list[list[int]], list[Messages]]:
    """Training sequences and the held-out workload (prompts that never occur in training)."""
    facts = fact_table(random.Random(seed))
    generators = make_generators(facts)
    held_rng = random.Random(seed + 1)
    workload: list[Messages] = []
    held: set[str] = set()
    while len(workload) < WORKLOAD_SIZE:
        messages, _ = sample_dialogue(held_rng, generators)
        prompt = apply_chat_template(messages)
        if prompt not in held:
            held.add(prompt)
            workload.append(messages)
    rng = random.Random(seed + 2)
    corpus: list[list[int]] = []
    while len(corpus) < samples:
        messages, answer = sample_dialogue(rng, generators)
        if apply_chat_template(messages) in held:
            continue
        ids = tokens_of(messages, answer)
        if len(ids) <= MAX_LEN:
            corpus.append(ids)
    return corpus, workload


def batches(corpus: list[list[int]], batch_size: int, rng: random.Random) -> Iterator[list[int]]:
    """Endless shuffled batches of corpus indices, of similar lengths (less padding, a faster CPU step)."""
    order = list(range(len(corpus)))
    pool = batch_size * 16
    while True:
        rng.shuffle(order)
        chunks: list[list[int]] = []
        for start in range(0, len(order), pool):
            group = sorted(order[start:start + pool], key=lambda i: len(corpus[i]))
            chunks += [group[j:j + batch_size] for j in range(0, len(group) - batch_size + 1, batch_size)]
        rng.shuffle(chunks)
        yield from chunks


def padded(rows: list[list[int]]) -> Tensor:
    """Right-padded with <pad> to the longest row."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def lr_at(step: int, total: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


# --- training ----------------------------------------------------------------------------------------


def train_target(corpus: list[list[int]], steps: int, batch_size: int, seed: int) -> TargetModel:
    torch.manual_seed(seed)
    model = TargetModel(TARGET_CONFIG).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:  # GPT-2 style: residual-branch outputs scaled down by depth
                residual = name.endswith(("o_proj.weight", "down_proj.weight"))
                p.normal_(0.0, 0.02 / math.sqrt(2 * TARGET_CONFIG.num_hidden_layers) if residual else 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.98), weight_decay=0.01)
    data = batches(corpus, batch_size, random.Random(seed))
    start = time.perf_counter()
    for step in range(steps):
        batch = padded([corpus[i] for i in next(data)])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, 3e-3)
        logits = model(batch[:, :-1]).logits
        labels = batch[:, 1:].masked_fill(batch[:, 1:] == PAD_ID, -100)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"target step {step:5d} loss {loss.item():.4f} ({time.perf_counter() - start:.0f}s)", flush=True)
    return model


def draft_vocabulary(labels: list[Tensor]) -> Tensor:
    """The DRAFT_VOCAB target ids the target predicts most often (ties by id), ascending, as SpecForge picks."""
    counts: Counter[int] = Counter()
    for row in labels:
        counts.update(row.tolist())
    ranked = sorted(range(VOCAB_SIZE), key=lambda t: (-counts[t], t))
    return torch.tensor(sorted(ranked[:DRAFT_VOCAB]))


def distillation_data(target: TargetModel, corpus: list[list[int]], positions: tuple[int, ...]) -> tuple[list[Tensor], list[Tensor]]:
    """Per sequence: captured features [T, k*H] (float32) and the target's greedy next token [T]."""
    features, labels = [], []
    with torch.inference_mode():
        for start in range(0, len(corpus), 64):
            rows = corpus[start:start + 64]
            out = target(padded(rows))
            feats = torch.cat([out.hidden_states[p] for p in positions], dim=-1).float()
            greedy = out.logits.argmax(-1)
            for i, r in enumerate(rows):
                features.append(feats[i, :len(r)].clone())
                labels.append(greedy[i, :len(r)].clone())
    return features, labels


def ttt_loss(drafter: Eagle3Drafter, embed: torch.nn.Embedding, tokens: Tensor, feats: Tensor, labels: Tensor,
             valid: Tensor, steps: int) -> tuple[Tensor, list[float]]:
    """EAGLE-3 training-time test over `steps` chained draft steps.

    Step s at row i stands for inference row i + s: it reads token i+1+s and, for s >= 1, the
    drafter's own hidden from step s-1; it attends to real rows 0..i (step 0) and to row i of every
    later step, which is what the cache holds when drafting. Labels are draft ids of the target's
    greedy token at position i+1+s (-100 where none).
    """
    layer = drafter.midlayer
    b, t = tokens.shape
    hidden = drafter.fc(feats)
    keys: list[Tensor] = []
    values: list[Tensor] = []
    rows = torch.arange(t)
    causal = rows.unsqueeze(1) >= rows.unsqueeze(0)
    diagonal = torch.eye(t, dtype=torch.bool)
    total = torch.zeros(())
    accuracies = []
    for s in range(steps):
        shifted = torch.full_like(tokens, PAD_ID)
        shifted[:, : t - 1 - s] = tokens[:, 1 + s:]
        target_ids = torch.full_like(labels, -100)
        target_ids[:, : t - 1 - s] = labels[:, 1 + s:]
        target_ids = target_ids.masked_fill(~valid, -100)
        cos, sin = drafter.rotary.tables(rows + s)
        q, k, v = layer.self_attn.project(layer.attention_input(embed(shifted), hidden), cos, sin)
        keys.append(k)
        values.append(v)
        mask = torch.cat([causal] + [diagonal] * s, dim=1)
        out = layer.finish(hidden, layer.self_attn.attend(q, torch.cat(keys, 2), torch.cat(values, 2), mask))
        logits = drafter.lm_head(drafter.norm(out))
        flat = target_ids.reshape(-1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), flat, ignore_index=-100)
        total = total + (0.8 ** s) * loss
        keep = flat != -100
        accuracies.append(float((logits.reshape(-1, logits.shape[-1]).argmax(-1)[keep] == flat[keep]).float().mean()))
        hidden = out
    return total, accuracies


def train_drafter(target: TargetModel, corpus: list[list[int]], positions: tuple[int, ...], steps: int, batch_size: int,
                  ttt_steps: int, seed: int) -> Eagle3Drafter:
    features, greedy = distillation_data(target, corpus, positions)
    vocab = draft_vocabulary(greedy)
    t2d_index = torch.full((VOCAB_SIZE,), -100, dtype=torch.int64)
    t2d_index[vocab] = torch.arange(len(vocab))
    config = DrafterConfig(
        hidden_size=128, intermediate_size=384, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB_SIZE,
        draft_vocab_size=DRAFT_VOCAB, target_hidden_size=TARGET_CONFIG.hidden_size, num_aux_hidden_states=len(positions),
        aux_layer_ids=ids_for_positions(positions), rms_norm_eps=1e-5, rope_theta=10000.0,
        max_position_embeddings=TARGET_CONFIG.max_position_embeddings, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    drafter = Eagle3Drafter(config).to(torch.float32)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
        drafter.d2t.copy_(vocab - torch.arange(len(vocab)))
        drafter.t2d.zero_()
        drafter.t2d[vocab] = True
    embed = target.model.embed_tokens
    opt = torch.optim.AdamW(drafter.parameters(), lr=2e-3, betas=(0.9, 0.98), weight_decay=0.01)
    data = batches(corpus, batch_size, random.Random(seed))
    start = time.perf_counter()
    for step in range(steps):
        chosen = next(data)
        tokens = padded([corpus[i] for i in chosen])
        width = tokens.shape[1]
        feats = torch.stack([F.pad(features[i], (0, 0, 0, width - len(corpus[i]))) for i in chosen])
        labels = torch.stack([F.pad(t2d_index[greedy[i]], (0, width - len(corpus[i])), value=-100) for i in chosen])
        valid = tokens != PAD_ID
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, 2e-3)
        loss, accuracies = ttt_loss(drafter, embed, tokens, feats, labels, valid, ttt_steps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            acc = " ".join(f"{a:.3f}" for a in accuracies)
            print(f"drafter step {step:5d} loss {loss.item():.4f} acc/step {acc} ({time.perf_counter() - start:.0f}s)", flush=True)
    return drafter


def ids_for_positions(positions: tuple[int, ...]) -> tuple[int, ...]:
    """sglang 0.5.23 Llama ids that capture exactly `positions`, checked with specctl's own table."""
    rule = capture_table.load_table().rule_for(SGLANG_VERSION, "LlamaForCausalLM")
    assert rule is not None
    ids = tuple(p - 1 for p in positions)
    outcome = capture_table.capture(rule, ids, TARGET_CONFIG.num_hidden_layers)
    assert outcome.captured == positions and not outcome.dropped and outcome.error is None, outcome
    return ids


# --- outputs -----------------------------------------------------------------------------------------


def write_manifest(path: Path, samples: int, seed: int) -> None:
    layers = ", ".join(str(x) for x in TRAIN_LAYERS)
    width = len(TRAIN_LAYERS) * TARGET_CONFIG.hidden_size
    path.write_text(f"""\
# EAGLE-3 drafter of the reference engine's tiny target: trained on HF hidden_states[2], [4], [5],
# i.e. the outputs of decoder layers {layers}. Written by scripts/train_reference_models.py.
apiVersion: specctl/v1
kind: DrafterManifest
metadata:
  name: tiny-llama-eagle3
  description: EAGLE-3 drafter for the reference engine's tiny Llama target (CPU rehearsal)
drafter:
  model: specctl-reference/tiny-llama-eagle3
  allow_unpinned: true
target:
  model: specctl-reference/tiny-llama
  allow_unpinned: true
  architecture: LlamaForCausalLM
  num_hidden_layers: {TARGET_CONFIG.num_hidden_layers}
  hidden_size: {TARGET_CONFIG.hidden_size}
  vocab_size: {TARGET_CONFIG.vocab_size}
capture:
  layers: [{layers}]
  width: {width}
training:
  framework: specctl scripts/train_reference_models.py
  dataset: synthetic chat corpus (seed {seed})
  samples: {samples}
  source_convention: "sglang {SGLANG_VERSION} Llama: ids {list(ids_for_positions(tuple(x + 1 for x in TRAIN_LAYERS)))} = outputs of layers {layers}"
""", encoding="utf-8")


def write_workload(path: Path, workload: list[Messages]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"messages": m}, sort_keys=True) for m in workload]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=6000, help="training dialogues")
    parser.add_argument("--target-steps", type=int, default=650)
    parser.add_argument("--drafter-steps", type=int, default=400)
    parser.add_argument("--drafter-samples", type=int, default=3000, help="dialogues distilled for the drafter")
    parser.add_argument("--ttt-steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only-drafter", action="store_true", help="reuse the saved target")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    corpus, workload = build_corpus(args.seed, args.samples)
    print(f"corpus: {len(corpus)} dialogues, {sum(map(len, corpus))} tokens", flush=True)
    write_workload(WORKLOAD, workload)
    started = time.perf_counter()
    if not args.only_drafter:
        save_checkpoint(train_target(corpus, args.target_steps, args.batch_size, args.seed), TARGET_DIR)
        print(f"target trained in {time.perf_counter() - started:.0f}s", flush=True)
    target = load_target(TARGET_DIR, torch.float32)  # the bfloat16 weights as shipped
    started = time.perf_counter()
    positions = tuple(x + 1 for x in TRAIN_LAYERS)
    drafter = train_drafter(target, corpus[: args.drafter_samples], positions, args.drafter_steps, args.batch_size,
                            args.ttt_steps, args.seed + 3)
    save_checkpoint(drafter, DRAFTER_DIR)
    print(f"drafter trained in {time.perf_counter() - started:.0f}s", flush=True)
    write_manifest(MANIFEST, args.drafter_samples, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
