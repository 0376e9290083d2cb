"""The client parses sglang 0.5.23 /generate and chat bodies: with and without speculative keys,
and refuses bodies of the wrong shape. (Its HTTP behaviour is in test_client_http.py.)"""

import pytest

from specctl.verdict.generation import MalformedBody, parse_chat, parse_generate
from specctl.verdict.measure import Measurement

SGLANG_BODY = {  # the shape of a finished sglang 0.5.23 response (reference document, section 4.2)
    "text": " Paris.",
    "output_ids": [12366, 13],
    "meta_info": {
        "id": "abc",
        "finish_reason": {"type": "length", "length": 8},
        "prompt_tokens": 12,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": 8,
        "cached_tokens": 0,
        "e2e_latency": 0.25,
        "spec_verify_ct": 3,
        "spec_accept_length": 2.6666666666666665,
        "spec_accept_rate": 0.5555555555555556,
        "spec_num_correct_drafts": 5,
        "spec_num_proposed_drafts": 9,
        "spec_correct_drafts_histogram": [1, 0, 1, 1],
    },
}


def test_speculative_body() -> None:
    g = parse_generate(SGLANG_BODY, 0.3)
    assert (g.completion_tokens, g.spec_verify_ct, g.spec_num_correct_drafts, g.finish_reason) == (8, 3, 5, "length")
    assert g.spec_correct_drafts_histogram == (1, 0, 1, 1) and g.speculative and g.client_latency_s == 0.3


def test_plain_body_has_no_spec_counters() -> None:
    body = {"text": "x", "meta_info": {k: v for k, v in SGLANG_BODY["meta_info"].items() if not k.startswith("spec_")}}
    g = parse_generate(body)
    assert not g.speculative and g.spec_verify_ct is None and g.spec_correct_drafts_histogram is None


def test_chat_body_falls_back_to_usage() -> None:
    body = {
        "choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2},
    }
    g = parse_chat(body, 0.1)
    assert (g.text, g.prompt_tokens, g.completion_tokens, g.finish_reason, g.speculative) == ("", 4, 2, "stop", False)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ([], "the answer"),
        ({"meta_info": "x"}, "meta_info"),
        ({"text": 3}, "text"),
        ({"output_ids": "12"}, "output_ids"),
        ({"meta_info": {"completion_tokens": "8"}}, "meta_info.completion_tokens"),
        ({"meta_info": {"spec_verify_ct": True}}, "meta_info.spec_verify_ct"),
        ({"meta_info": {"e2e_latency": "0.2"}}, "meta_info.e2e_latency"),
        ({"meta_info": {"finish_reason": {"type": 1}}}, "meta_info.finish_reason"),
    ],
)
def test_wrong_types_are_refused_not_guessed(body: object, where: str) -> None:
    """A counter sent as text must not read as "no speculation"."""
    with pytest.raises(MalformedBody, match=f"^{where}: expected"):
        parse_generate(body)


def test_measurement_round_trips_through_the_ledger_form() -> None:
    m = Measurement((parse_generate(SGLANG_BODY, 0.3),), 1.5)
    back = Measurement.from_dict(m.to_dict())
    assert back.mean_accept_length == m.mean_accept_length and back.generations[0].spec_verify_ct == 3
