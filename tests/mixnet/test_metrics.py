"""Tests for mixnet.metrics: a node's Prometheus metrics in its own registry."""

from __future__ import annotations

import math
import os

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mixnet.metrics import OTHER_LABEL, ROUND_OUTCOMES, SECONDS_BUCKETS, NodeMetrics

Key = tuple[str, frozenset[tuple[str, str]]]
Samples = dict[Key, float]


def samples(metrics: NodeMetrics) -> Samples:
    """Every sample of ``metrics.render()``, parsed back: (name, labels) -> value."""
    body, _ = metrics.render()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode("utf-8"))
        for sample in family.samples
    }


def key(name: str, node: str = "mix1", hop: str = "0", **extra: str) -> Key:
    """The sample key of series ``name`` with labels node, hop and ``extra``."""
    return (name, frozenset({"node": node, "hop": hop, **extra}.items()))


def test_render_is_text_format_with_zeroes_from_the_start() -> None:
    metrics = NodeMetrics("mix1", 0, "entry")
    body, content_type = metrics.render()
    assert isinstance(body, bytes) and content_type == CONTENT_TYPE_LATEST
    text = body.decode("utf-8")
    assert "# TYPE mixnet_frames_total counter" in text
    assert 'mixnet_frames_total{hop="0",node="mix1"} 0.0' in text
    found = samples(metrics)
    for name in ("mixnet_frames_total", "mixnet_messages_total", "mixnet_dropped_total",
                 "mixnet_open_rounds", "mixnet_queued_messages", "mixnet_receipts",
                 "mixnet_hop_seconds_count", "mixnet_round_seconds_count"):
        assert found[key(name)] == 0.0, name
    for outcome in ROUND_OUTCOMES:
        assert found[key("mixnet_rounds_total", outcome=outcome)] == 0.0
    assert found[("mixnet_node_info", frozenset(
        {"node": "mix1", "hop": "0", "role": "entry"}.items()))] == 1.0
    assert not any(name == "mixnet_errors_total" for name, _ in found)


def test_counters_gauges_and_histograms_have_the_right_labels_and_values() -> None:
    metrics = NodeMetrics("mix2", 1, "mix")
    for _ in range(3):
        metrics.frame()
    metrics.error("malformed-frame")
    metrics.error("malformed-frame")
    metrics.error("unknown-round")
    metrics.refuse("too-many-connections")
    metrics.round_finished("confirmed", messages=10, dropped=2, hop_seconds=0.3)
    metrics.round_finished("aborted")
    metrics.round_finished("confirmed", messages=5, hop_seconds=700.0, round_seconds=42)
    metrics.set_open_rounds(2)
    metrics.set_queued(17)
    metrics.set_receipts(40)
    found = samples(metrics)
    node = {"node": "mix2", "hop": "1"}
    assert found[key("mixnet_frames_total", **node)] == 3
    assert found[key("mixnet_errors_total", code="malformed-frame", **node)] == 2
    assert found[key("mixnet_errors_total", code="unknown-round", **node)] == 1
    assert found[key("mixnet_refused_total", reason="too-many-connections", **node)] == 1
    assert found[key("mixnet_rounds_total", outcome="confirmed", **node)] == 2
    assert found[key("mixnet_rounds_total", outcome="aborted", **node)] == 1
    assert found[key("mixnet_rounds_total", outcome="done", **node)] == 0
    assert found[key("mixnet_messages_total", **node)] == 15
    assert found[key("mixnet_dropped_total", **node)] == 2
    assert found[key("mixnet_open_rounds", **node)] == 2
    assert found[key("mixnet_queued_messages", **node)] == 17
    assert found[key("mixnet_receipts", **node)] == 40
    assert found[key("mixnet_hop_seconds_count", **node)] == 2
    assert found[key("mixnet_hop_seconds_sum", **node)] == pytest.approx(700.3)
    assert found[key("mixnet_hop_seconds_bucket", le="0.5", **node)] == 1
    assert found[key("mixnet_hop_seconds_bucket", le="600.0", **node)] == 1
    assert found[key("mixnet_hop_seconds_bucket", le="+Inf", **node)] == 2
    assert found[key("mixnet_round_seconds_count", **node)] == 1
    assert found[key("mixnet_round_seconds_sum", **node)] == 42
    metrics.set_open_rounds(0)
    assert samples(metrics)[key("mixnet_open_rounds", **node)] == 0


def test_buckets_span_ten_milliseconds_to_ten_minutes() -> None:
    assert SECONDS_BUCKETS[0] == 0.01 and SECONDS_BUCKETS[-1] == 600.0
    assert list(SECONDS_BUCKETS) == sorted(set(SECONDS_BUCKETS))
    metrics = NodeMetrics("sink", 3, "sink")
    bounds = {
        dict(labels)["le"]
        for name, labels in samples(metrics)
        if name == "mixnet_round_seconds_bucket"
    }
    assert bounds == {*(repr(bound) for bound in SECONDS_BUCKETS), "+Inf"}


def test_two_nodes_in_one_process_do_not_collide() -> None:
    first = NodeMetrics("mix1", 0, "entry")
    second = NodeMetrics("mix1", 0, "entry")  # even the same name: separate registries
    other = NodeMetrics("analyzer", 3, "sink")
    first.frame()
    first.round_finished("confirmed", messages=4)
    other.round_finished("done", messages=9, round_seconds=1.5)
    assert samples(first)[key("mixnet_frames_total")] == 1
    assert samples(second)[key("mixnet_frames_total")] == 0
    assert samples(second)[key("mixnet_messages_total")] == 0
    found = samples(other)
    assert found[key("mixnet_messages_total", node="analyzer", hop="3")] == 9
    assert not any(dict(labels).get("node") == "mix1" for _, labels in found)
    assert first.registry is not second.registry


def test_the_global_registry_is_left_alone() -> None:
    metrics = NodeMetrics("lonely", 5, "mix")
    metrics.frame()
    assert REGISTRY.get_sample_value("mixnet_frames_total", {"node": "lonely", "hop": "5"}) is None
    assert b"mixnet_frames_total" not in generate_latest(REGISTRY)


def test_process_and_platform_metrics_are_registered() -> None:
    text = NodeMetrics("mix1", 0, "entry").render()[0].decode("utf-8")
    assert "python_info{" in text
    if os.path.exists("/proc/self/stat"):
        assert "process_cpu_seconds_total" in text
        assert "process_resident_memory_bytes" in text


def test_odd_label_values_become_other() -> None:
    metrics = NodeMetrics("mix1", 0, "entry")
    metrics.error('bad"code\nwith newline')
    metrics.refuse("x" * 65)
    metrics.round_finished("")
    found = samples(metrics)
    assert found[key("mixnet_errors_total", code=OTHER_LABEL)] == 1
    assert found[key("mixnet_refused_total", reason=OTHER_LABEL)] == 1
    assert found[key("mixnet_rounds_total", outcome=OTHER_LABEL)] == 1


def test_arguments_are_checked_before_anything_is_recorded() -> None:
    metrics = NodeMetrics("mix1", 0, "entry")
    bad_calls: list[tuple[type[Exception], dict[str, object]]] = [
        (ValueError, {"messages": -1}),
        (ValueError, {"dropped": -1}),
        (TypeError, {"messages": True}),
        (TypeError, {"messages": 1.0}),
        (ValueError, {"hop_seconds": -0.1}),
        (ValueError, {"round_seconds": math.nan}),
        (ValueError, {"round_seconds": math.inf}),
        (TypeError, {"hop_seconds": "1"}),
    ]
    for error, kwargs in bad_calls:
        with pytest.raises(error):
            metrics.round_finished("confirmed", **{"dropped": 1, **kwargs})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        metrics.round_finished(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        metrics.error(404)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        metrics.set_open_rounds(-1)
    with pytest.raises(TypeError):
        metrics.set_queued(2.5)  # type: ignore[arg-type]
    found = samples(metrics)
    assert found[key("mixnet_rounds_total", outcome="confirmed")] == 0
    assert found[key("mixnet_messages_total")] == 0
    assert found[key("mixnet_dropped_total")] == 0
    assert found[key("mixnet_hop_seconds_count")] == 0


@pytest.mark.parametrize(
    ("node", "hop", "role", "error"),
    [
        ("", 0, "mix", ValueError),
        ("mix1", -1, "mix", ValueError),
        ("mix1", True, "mix", TypeError),
        ("mix1", 0, "", ValueError),
        (None, 0, "mix", ValueError),
    ],
)
def test_construction_is_checked(node: object, hop: object, role: object,
                                 error: type[Exception]) -> None:
    with pytest.raises(error):
        NodeMetrics(node, hop, role)  # type: ignore[arg-type]
