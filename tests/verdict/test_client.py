"""The client parses sglang 0.5.23 /generate bodies: with and without speculative keys."""

from specctl.verdict.client import parse_generate

SGLANG_BODY = {  # the shape of a finished sglang 0.5.23 response (reference document, section 4.2)
    "text": " Paris.", "output_ids": [12366, 13],
    "meta_info": {"id": "abc", "finish_reason": {"type": "length", "length": 8}, "prompt_tokens": 12, "weight_version": "default",
                  "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 8, "cached_tokens": 0, "e2e_latency": 0.25,
                  "spec_verify_ct": 3, "spec_accept_length": 2.6666666666666665, "spec_accept_rate": 0.5555555555555556,
                  "spec_num_correct_drafts": 5, "spec_num_proposed_drafts": 9, "spec_correct_drafts_histogram": [1, 0, 1, 1]},
}


def test_speculative_body() -> None:
    g = parse_generate(SGLANG_BODY, 0.3)
    assert (g.completion_tokens, g.spec_verify_ct, g.spec_num_correct_drafts, g.finish_reason) == (8, 3, 5, "length")
    assert g.spec_correct_drafts_histogram == (1, 0, 1, 1) and g.speculative and g.client_latency_s == 0.3


def test_plain_body_has_no_spec_counters() -> None:
    body = {"text": "x", "meta_info": {k: v for k, v in SGLANG_BODY["meta_info"].items() if not k.startswith("spec_")}}
    g = parse_generate(body)
    assert not g.speculative and g.spec_verify_ct is None and g.spec_correct_drafts_histogram is None
