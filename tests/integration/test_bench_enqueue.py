"""measure_enqueue, the bench's enqueue figure: it measures, and leaves the queue as it found it."""

import pytest

from bench.enqueue import measure_enqueue
from rivet.models import Task


@pytest.mark.django_db(transaction=True)
def test_measure_enqueue_reports_both_rates_and_leaves_nothing_behind() -> None:
    Task.objects.create(queue="eb-bench", kind="noop", payload={"left": "over"})
    Task.objects.create(queue="eb-other", kind="noop")
    figures = measure_enqueue(single=12, bulk=30, batch=8, queue="eb-bench", runs=2, keyed=True)
    assert figures["single_per_s"] > 0 and figures["bulk_per_s"] > 0
    assert figures["single_store_per_s"] > 0 and figures["bulk_store_per_s"] > 0
    assert len(figures["single_runs"]) == len(figures["bulk_runs"]) == 2
    assert (figures["single"], figures["bulk"], figures["batch"]) == (12, 30, 8)
    assert list(Task.objects.values_list("queue", flat=True)) == ["eb-other"]


def test_measure_enqueue_refuses_a_negative_count_or_nothing_to_measure() -> None:
    with pytest.raises(ValueError, match="single=-1"):
        measure_enqueue(single=-1)
    with pytest.raises(ValueError, match="not both 0"):
        measure_enqueue(single=0, bulk=0)
    with pytest.raises(ValueError, match="runs=0"):
        measure_enqueue(runs=0)


@pytest.mark.django_db(transaction=True)
def test_measure_enqueue_skips_a_count_of_zero() -> None:
    figures = measure_enqueue(single=0, bulk=20, batch=8, queue="eb-bench")
    assert figures["single_per_s"] == 0.0 and figures["single_secs"] == 0.0
    assert figures["single_store_per_s"] == 0.0 and figures["bulk_store_per_s"] > 0
    assert figures["bulk_per_s"] > 0 and figures["bulk_secs"] > 0
