"""A data set whose longest batch cannot fit in the device's memory is refused in one line before any work, with
the --max-length that fits; the counts it rests on are the model's tensors' own bytes."""

from __future__ import annotations

import json

import pytest

from skipcore.commands import main
from skipcore.errors import UserError
from skipcore.models.loading import load_model
from skipcore.training import memory
from tests.helpers import refused, train_argv


def long_pairs(path, n: int, words: int):
    path.write_text(
        "".join(json.dumps({"source": f"s{i}", "target": " ".join(["t"] * words)}) + "\n" for i in range(n))
    )
    return path


def test_training_state_is_the_weights_and_three_copies_of_what_is_trained(model_dirs):
    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    weights = sum(t.numel() * t.element_size() for t in {id(p): p for p in model.parameters()}.values())
    assert memory.training_state_bytes(model) == 4 * weights
    for p in model.parameters():
        p.requires_grad_(p.ndim == 1)  # norms and biases alone trained
    trained = sum(p.numel() * 4 for p in model.parameters() if p.ndim == 1)
    assert memory.training_state_bytes(model) == weights + 3 * trained


def test_a_batch_of_logits_past_the_devices_memory_is_refused_with_the_length_that_fits(
    model_dirs, tmp_path, capsys, monkeypatch
):
    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    vocab = model.get_output_embeddings().weight.shape[0]
    state = memory.training_state_bytes(model)
    data = long_pairs(tmp_path / "long.jsonl", 8, 100)
    # memory for the training state and a batch of 4 rows of 40 tokens' logits, far less than the pairs' length
    monkeypatch.setattr(memory, "device_memory", lambda device: state + memory.LOGIT_BYTES * 4 * 40 * vocab)
    out = tmp_path / "run"
    argv = train_argv(model_dirs["opt"], out, "--dataset", str(data), "--batch-size", "4", "--steps", "1")
    err = refused(capsys, argv)
    assert "in a batch of 4 needs at least" in err and "pass --max-length 40 at most" in err, err
    assert not out.exists()
    assert main([*argv, "--max-length", "40"]) == 0 and (out / "model.safetensors").is_file()


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_a_device_that_does_not_say_its_memory_is_not_checked(device):
    assert memory.device_memory(device) is None


def test_processes_sharing_the_device_and_dev_pairs_are_counted(model_dirs, monkeypatch):
    """Two processes on one CPU each hold a model and a batch; a dev pair is counted in its own slice of the dev
    pairs (scored in order, a batch at a time), which may hold fewer rows than a training batch."""
    from skipcore.training.batching import Pair

    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    vocab = model.get_output_embeddings().weight.shape[0]
    state = memory.training_state_bytes(model)
    short, long = Pair((1,) * 10, (2,) * 10), Pair((1,) * 10, (2,) * 90)
    one = state + memory.LOGIT_BYTES * 2 * 19 * vocab  # two rows of the short pair's 19 columns, exactly
    monkeypatch.setattr(memory, "device_memory", lambda device: one)
    memory.check_batches_fit(model, [short, short], 2, "cpu", False)
    with pytest.raises(UserError, match="in each of 2 processes"):
        memory.check_batches_fit(model, [short, short], 2, "cpu", False, processes=2)
    with pytest.raises(UserError, match=r"the longest dev pair \(100 tokens\) in a batch of 2"):
        memory.check_batches_fit(model, [short, short], 2, "cpu", False, dev=[long, short])
    alone = state + memory.LOGIT_BYTES * 99 * vocab  # the long pair's 99 columns in one row, exactly
    monkeypatch.setattr(memory, "device_memory", lambda device: alone)
    memory.check_batches_fit(model, [short, short], 2, "cpu", False, dev=[short, short, long])  # last, alone
    with pytest.raises(UserError, match=r"the longest training pair \(100 tokens\) in a batch of 2"):
        memory.check_batches_fit(model, [long, short], 2, "cpu", False)


def test_what_cannot_fit_is_said_with_a_way_on_that_can_be_taken(model_dirs, monkeypatch, capsys):
    """A model whose training state alone is too much is told so (no --max-length to cut); a resumed run, whose
    --max-length and --batch-size are the run's, is told to move, not to change them; one row too long is told
    to cut, never to shrink a batch of one."""
    from skipcore.training.batching import Pair

    model, _ = load_model(str(model_dirs["opt"]), device="cpu", dtype="float32")
    state = memory.training_state_bytes(model)
    long = Pair((1,) * 10, (2,) * 90)
    monkeypatch.setattr(memory, "device_memory", lambda device: state - 1)
    with pytest.raises(UserError, match="training state alone needs") as e:
        memory.check_batches_fit(model, [long], 1, "cpu", False)
    assert "--max-length" not in str(e.value) and e.value.fields == ()
    monkeypatch.setattr(memory, "device_memory", lambda device: state + memory.LOGIT_BYTES * 40 * 300)
    with pytest.raises(UserError, match="resume it on a device with more memory") as e:
        memory.check_batches_fit(model, [long], 1, "cpu", False, resuming=True)
    with pytest.raises(UserError, match=r"pass --max-length \d+ at most \(the default") as e:
        memory.check_batches_fit(model, [long], 1, "cpu", False)
    assert "--batch-size" not in str(e.value)  # a batch of one: shrinking it is no way on, cutting is


def test_a_container_limit_below_the_ram_is_the_cpus_memory(tmp_path, monkeypatch):
    limit = tmp_path / "memory.max"
    limit.write_text("1073741824\n")
    monkeypatch.setattr(memory, "CGROUP_LIMITS", (str(limit), str(tmp_path / "absent")))
    assert memory.device_memory("cpu") == 2**30
    limit.write_text("max\n")  # none set: the RAM
    assert memory.device_memory("cpu") > 2**30


def test_the_limit_of_the_processs_own_group_is_read(tmp_path, monkeypatch):
    """/proc/self/cgroup names the group below the container's root; a limit set there counts too."""
    groups = tmp_path / "cgroup"
    groups.write_text("12:memory:/job/7\n9:name=systemd:/\n0::/slice/run.scope\n")
    monkeypatch.setattr(memory, "CGROUP_SELF", str(groups))
    assert memory._own_group_limits() == [
        "/sys/fs/cgroup/memory/job/7/memory.limit_in_bytes",
        "/sys/fs/cgroup/slice/run.scope/memory.max",
    ]
