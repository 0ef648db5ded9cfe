"""The worker's options: flag beats variable beats setting; a bad value names where it came from."""

from __future__ import annotations

import dataclasses

import pytest

from rivet.errors import InvalidInput
from rivet.worker import WorkerConfig
from rivet.worker.options import OptionError, resolve


def test_a_flag_beats_its_variable_which_beats_the_setting(settings):
    settings.RIVET = {"CONCURRENCY": 7, "LEASE_TTL_SECS": 9}
    env = {"RIVET_CONCURRENCY": "5", "RIVET_LEASE_TTL_SECS": "3"}
    values = resolve({"concurrency": "2"}, env)
    assert (values["concurrency"], values["lease_ttl"]) == (2, 3.0)
    values = resolve({}, {})
    assert (values["concurrency"], values["lease_ttl"]) == (7, 9.0)


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"concurrency": "0"}, {}, "--concurrency must be an integer from 1 to 1024, got '0'"),
        ({"concurrency": "100000"}, {}, "--concurrency must be an integer from 1 to 1024"),
        ({}, {"RIVET_LEASE_TTL_SECS": "1e9"}, "must be a number of seconds > 0 and <= 86400"),
        ({"pool_size": "5000"}, {}, "--pool-size must be an integer from 2 to 1024, got '5000'"),
        ({"connect_timeout": "0"}, {}, "--connect-timeout-secs must be a number of seconds > 0"),
        ({"max_jobs": "0"}, {}, "--max-jobs must be an integer >= 1"),
        ({}, {"RIVET_LEASE_TTL_SECS": "abc"}, "RIVET_LEASE_TTL_SECS must be a number"),
        ({"pool_size": "1"}, {}, "--pool-size must be an integer from 2 to 1024"),
        ({"queues": "ok,no way"}, {}, "--queue must be queue names"),
        ({}, {"RIVET_LOG_FORMAT": "xml"}, "RIVET_LOG_FORMAT must be text or json"),
    ],
)
def test_a_bad_option_names_where_it_came_from(flags, env, message):
    with pytest.raises(OptionError) as caught:
        resolve(flags, env)
    assert message in str(caught.value)


def test_the_worker_config_from_flags_variables_and_settings_is_the_one_a_test_builds(settings):
    settings.RIVET = {"QUEUE": "mail", "CONCURRENCY": 7, "RETRY_BACKOFF_SECS": 0.5}
    env = {"RIVET_LEASE_TTL_SECS": "12", "RIVET_OWNER": "w-1"}
    config = WorkerConfig.from_sources({"queues": "high,mail", "prefetch": "3"}, env, once=True)
    built = WorkerConfig(
        queues=("high", "mail"),
        owner="w-1",
        lease_ttl=12.0,
        concurrency=7,
        prefetch=3,
        retry_backoff=0.5,
        once=True,
    )
    assert config == built
    assert (config.retry_policy.backoff_secs, config.abandon_limit) == (0.5, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.concurrency = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an integer from 1 to 1024, got 0"),
        ({"lease_ttl": -1}, "lease_ttl must be a number of seconds > 0"),
        ({"task_log_level": "loud"}, "task_log_level must be info or debug"),
        ({"queues": ()}, "a worker needs at least one queue"),
        ({"queues": ("no way",)}, "queue"),
    ],
)
def test_a_worker_config_refuses_a_bad_value_by_its_name(options, message):
    with pytest.raises(InvalidInput) as caught:
        WorkerConfig(**{"queues": ("q",), **options})
    assert message in str(caught.value)


def test_async_concurrency_from_its_flag_variable_or_setting_and_its_bounds(settings):
    settings.RIVET = {"ASYNC_CONCURRENCY": 300}
    assert resolve({}, {})["async_concurrency"] == 300
    assert resolve({}, {"RIVET_ASYNC_CONCURRENCY": "40"})["async_concurrency"] == 40
    assert (
        resolve({"async_concurrency": "7"}, {"RIVET_ASYNC_CONCURRENCY": "40"})["async_concurrency"]
        == 7
    )
    settings.RIVET = {}
    assert resolve({}, {})["async_concurrency"] == 100
    for flags, env, message in [
        ({"async_concurrency": "0"}, {}, "--async-concurrency must be an integer from 1 to"),
        ({}, {"RIVET_ASYNC_CONCURRENCY": "lots"}, "RIVET_ASYNC_CONCURRENCY must be an integer"),
    ]:
        with pytest.raises(OptionError, match=message):
            resolve(flags, env)
    config = WorkerConfig(queues=("q",), async_concurrency=50)
    assert config.async_abandon_limit == 25
