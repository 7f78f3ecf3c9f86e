"""/v1/models as Triton's front end lists models, /health/ready, and the metrics the OpenAI routes
leave: the core's per-model counters and the vLLM families tiny_llm reports."""

from __future__ import annotations

import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server.openai.conftest import METRICS_HEADER, MODEL, OpenAIServer


def metric_samples(server: OpenAIServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on the OpenAI port's /metrics (restricted in these tests: the header is sent), by
    the parser's sample names: it names a counter's sample ``*_total`` whatever the family is called."""
    headers = {METRICS_HEADER[0]: METRICS_HEADER[1]}
    request = urllib.request.Request(f"{server.base_url}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"model": MODEL, "version": "1", **labels}.items())))
    assert key in samples, f"{name}{labels} is not on /metrics"
    return samples[key]


def test_models_lists_every_ready_model_once(client: openai.OpenAI) -> None:
    models = {model.id: model for model in client.models.list()}
    assert set(models) == {
        MODEL,
        "simple",
        "word_echo",
        "word_echo_untokenized",
        "tiny_embedding",
        "embedding_echo",
        # the word_pipeline ensemble and the models its steps run, loaded with it
        "word_pipeline",
        "split_words",
        "cycle_words",
        "shout",
    }
    assert models[MODEL].object == "model" and models[MODEL].owned_by == "triton"
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no_such_model")


def test_health_ready(openai_server: OpenAIServer) -> None:
    with urllib.request.urlopen(f"{openai_server.base_url}/health/ready", timeout=30) as reply:
        assert reply.status == 200


def test_requests_are_counted_by_the_core_and_by_the_model(
    openai_server: OpenAIServer, client: openai.OpenAI
) -> None:
    before = metric_samples(openai_server)
    # Greedy: sampled, an end-of-text token could come before max_tokens.
    client.completions.create(model=MODEL, prompt="hello", max_tokens=5, temperature=0)
    messages = [{"role": "user", "content": "hi"}]
    list(
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=7, temperature=0, stream=True
        )
    )
    after = metric_samples(openai_server)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("nv_inference_request_success_total") == 2
    assert grew("vllm:generation_tokens_total") == 12
    assert grew("vllm:time_to_first_token_seconds_count") == 2
    assert grew("vllm:e2e_request_latency_seconds_count") == 2
    assert grew("vllm:time_to_first_token_seconds_sum") > 0
