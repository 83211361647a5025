"""Feature test for T4's follow-up: ``device_map="auto"`` under torchrun says, once and on rank 0, that each process
loads a full copy.

Since ``device_map="auto"`` no longer means tensor parallelism in a distributed run (T4, upstream 4.54.0), every
process loads the whole model. Upstream logs that at INFO level, which the default verbosity hides: users who
relied on the automatic sharding get one full copy per rank without a word. The patch logs a warning instead,
once per process and on rank 0 only, when there is more than one process, with advice that works on the release
at hand.

Run for real: 2 spawned ranks with torchrun's environment (no process group), the default transformers
verbosity, each rank loads the same checkpoint twice with ``device_map="auto"`` and records what transformers'
logger emitted at WARNING or above. The INFO hint the warning replaces is looked for at INFO verbosity. The loads
next to the warning (a sharded or tensor-parallel configuration, odd launcher variables) are guards:
tests/guards/test_t4_device_map_auto.py.
"""

from __future__ import annotations

import re

import pytest

from harness import run_ranks
from tiny_llama import save_small

pytestmark = pytest.mark.feature(package="transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_small(tmp_path_factory.mktemp("llama"))


def _load_twice_recording_warnings(rank, world_size, ckpt, device_map):
    import logging

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    assert hf_logging.get_verbosity() == logging.WARNING, "the test needs transformers' default verbosity"
    records: list[str] = []

    class Record(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Record(level=logging.WARNING)
    library_logger = logging.getLogger("transformers")  # where transformers' own handler sits
    library_logger.addHandler(handler)
    try:
        for _ in range(2):
            AutoModelForCausalLM.from_pretrained(ckpt, device_map=device_map)
    finally:
        library_logger.removeHandler(handler)
    return [r for r in records if "device_map" in r]


def test_rank_0_is_told_once_that_each_process_loads_a_full_copy(checkpoint):
    rank0, rank1 = run_ranks(_load_twice_recording_warnings, 2, checkpoint, "auto", init_group=False)
    assert len(rank0) == 1, f"rank 0 must be told exactly once, got {rank0}"
    (message,) = rank0
    assert rank1 == [], f"only rank 0 speaks, rank 1 logged {rank1}"
    _advice_is_current(message, checkpoint)
    assert "full copy of the model in each process" in message and "WORLD_SIZE=2" in message, message
    assert 'device_map={"": local_rank}' in message and "LOCAL_RANK" in message, f"local_rank unexplained: {message}"


def _advice_is_current(message, ckpt):
    """The tensor-parallel advice, passed to ``from_pretrained`` as written, draws no deprecation warning from this
    release (5.x deprecates ``tp_plan=`` in favour of ``distributed_config=DistributedConfig(tp_plan=...)``). One
    process without a distributed environment: the load itself may fail (4.x wants a process group), only the
    warnings about the arguments are judged."""
    import warnings

    import transformers

    match = re.search(r"For tensor parallelism, pass `([^`]+)` instead", message)
    assert match, f"no tensor-parallel advice: {message}"
    advice = match.group(1)
    kwargs = eval(f"dict({advice})", {"DistributedConfig": getattr(transformers, "DistributedConfig", None)})  # noqa: S307
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            transformers.AutoModelForCausalLM.from_pretrained(ckpt, **kwargs)
        except (OSError, ValueError, RuntimeError):
            pass
    deprecated = [str(w.message) for w in caught if issubclass(w.category, FutureWarning | DeprecationWarning)]
    assert not deprecated, f"the advice `{advice}` is deprecated on this release: {deprecated}"


def test_a_single_process_is_not_told(checkpoint):
    """One process (``torchrun --nproc-per-node 1``, or a launcher that always sets WORLD_SIZE=1) holds the only
    copy: nothing to say."""
    assert run_ranks(_load_twice_recording_warnings, 1, checkpoint, "auto", init_group=False) == [[]]


def test_other_device_maps_stay_silent(checkpoint):
    """Nothing new for a load one replica per process: no warning on any rank."""
    results = run_ranks(_load_twice_recording_warnings, 2, checkpoint, "cpu", init_group=False)
    assert results == [[], []], results


def _load_recording_info(rank, world_size, ckpt):
    import logging

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_info()
    records: list[str] = []

    class Record(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Record(level=logging.INFO)
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    try:
        AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto")
    finally:
        library_logger.removeHandler(handler)
    return [r for r in records if "device_map" in r]


def test_the_info_hint_is_gone_at_every_verbosity(checkpoint):
    """The INFO hint the warning replaces (it rendered its advice as ``device_map={: ...}`` and spoke to every
    process, a single one under torchrun too) is not logged at INFO verbosity either: one process, WORLD_SIZE=1."""
    (records,) = run_ranks(_load_recording_info, 1, checkpoint, init_group=False)
    assert not [r for r in records if "You've set device_map=`auto`" in r], records


def _load_in(rank, world_size, ckpt, env):
    """torchrun's variables replaced by ``env``, then the recorded loads (no rendezvous: none is needed)."""
    import os

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    os.environ.update(env)
    return _load_twice_recording_warnings(rank, world_size, ckpt, "auto")


@pytest.mark.parametrize(
    "env",
    [{"WORLD_SIZE": "2", "RANK": ""}, {"WORLD_SIZE": "2", "RANK": "zero"}, {"WORLD_SIZE": "2", "LOCAL_RANK": "1"}],
    ids=["rank-empty", "rank-not-a-number", "rank-only-as-local-rank"],
)
def test_a_process_that_is_not_known_as_rank_0_loads_and_is_not_told(checkpoint, env):
    """The rank is read as a launcher wrote it: an empty or non-numeric ``RANK`` (which ``int()`` refused, failing
    the load) and a process known only as ``LOCAL_RANK=1`` load as on the upstream release, without the warning."""
    assert run_ranks(_load_in, 1, checkpoint, env, init_group=False) == [[]]
