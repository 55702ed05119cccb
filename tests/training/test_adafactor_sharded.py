"""Adafactor on FSDP's sharded weights: refused in one sentence on a torch where it was not proved."""

import pytest
import torch
from torch.torch_version import TorchVersion

from t2t.errors import T2TError
from t2t.training.adafactor import Adafactor

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")


@pytest.fixture
def sharded_weight():
    """A parameter as FSDP leaves it: a DTensor sharded over a one-process CPU mesh."""
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    torch.distributed.init_process_group("gloo", rank=0, world_size=1, store=torch.distributed.HashStore())
    try:
        yield torch.nn.Parameter(distribute_tensor(torch.ones(4, 4), init_device_mesh("cpu", (1,)), [Shard(0)]))
    finally:
        torch.distributed.destroy_process_group()


def test_sharded_weights_on_a_torch_older_than_the_proved_one_are_refused(sharded_weight, monkeypatch):
    monkeypatch.setattr(torch, "__version__", TorchVersion("2.7.1"))
    with pytest.raises(T2TError, match=r"^FSDP with the Adafactor optimizer needs torch 2\.13 or newer \(this is "
                                       r"torch 2\.7\.1\); upgrade torch, or set optimizer\.name=adamw or "
                                       r"parallelism=ddp\.$"):
        Adafactor([sharded_weight])


def test_sharded_weights_on_the_proved_torch_and_plain_ones_on_an_old_torch_are_taken(sharded_weight, monkeypatch):
    monkeypatch.setattr(torch, "__version__", TorchVersion("2.13.0"))
    assert Adafactor([sharded_weight]).param_groups[0]["params"] == [sharded_weight]
    monkeypatch.setattr(torch, "__version__", TorchVersion("2.7.1"))
    plain = torch.nn.Parameter(torch.ones(4, 4))
    assert Adafactor([plain]).param_groups[0]["params"] == [plain]
