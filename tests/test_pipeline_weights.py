"""Weight publication: versions, exact copies including buffers, no torn replicas under threads."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

from pipeline.transport.weights import WeightPublisher


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("mean", torch.zeros(4))


def test_publish_pull_copies_params_and_buffers():
    learner = Net()
    replica = copy.deepcopy(learner)
    pub = WeightPublisher(learner)
    assert pub.version == -1
    assert pub.pull(replica, local_version=-1) == -1  # nothing published yet
    with torch.no_grad():
        learner.a.weight.add_(1.0)
        learner.mean.fill_(3.0)
        learner.count.fill_(17)
    pub.publish(learner, version=5)
    assert pub.pull(replica, local_version=-1) == 5
    for (k, v), (_, w) in zip(learner.state_dict().items(), replica.state_dict().items(), strict=True):
        assert torch.equal(v, w), k
    # Same version again: nothing copied, even if the replica drifted.
    with torch.no_grad():
        replica.b.bias.fill_(99.0)
    assert pub.pull(replica, local_version=5) == 5
    assert bool((replica.b.bias == 99.0).all())


def test_learner_changes_after_publish_do_not_leak():
    learner = Net()
    replica = copy.deepcopy(learner)
    pub = WeightPublisher(learner)
    pub.publish(learner, 1)
    snapshot = learner.a.weight.detach().clone()
    with torch.no_grad():
        learner.a.weight.add_(5.0)  # an update in progress, not yet published
    pub.pull(replica, 0)
    assert torch.equal(replica.a.weight, snapshot)


def test_mismatched_replica_is_refused():
    pub = WeightPublisher(Net())
    pub.publish(Net(), 1)
    other = nn.Linear(4, 8)
    with pytest.raises(ValueError, match="does not match the published one"):
        pub.pull(other, 0)
    bad = Net()
    bad.mean = torch.zeros(5)
    with pytest.raises(ValueError, match="'mean' has shape"):
        pub.pull(bad, 0)


def test_no_torn_replica_under_concurrent_publish():
    torch.set_num_threads(1)
    learner = Net()
    with torch.no_grad():  # every published version, 0 included, is uniform: v everywhere
        for t in learner.state_dict().values():
            t.fill_(0.0)
    pub = WeightPublisher(learner)
    pub.publish(learner, 0)
    replica = copy.deepcopy(learner)  # before the publisher starts writing
    stop = threading.Event()
    seen: list[int] = []
    errors: list[str] = []

    def publisher() -> None:
        for v in range(1, 300):
            with torch.no_grad():
                for p in learner.parameters():
                    p.fill_(float(v))
                learner.mean.fill_(float(v))
            pub.publish(learner, v)
        stop.set()

    def reader() -> None:
        local = -1
        while not stop.is_set() or local < 299:
            local = pub.pull(replica, local)
            values = {float(t.flatten()[0]) for t in replica.state_dict().values() if t.is_floating_point()}
            if len(values) != 1 or not all(
                bool((t == t.flatten()[0]).all()) for t in replica.state_dict().values()
            ):
                errors.append(f"torn replica at version {local}: {values}")
                return
            if local >= 1 and values != {float(local)}:
                errors.append(f"version {local} but weights {values}")
                return
            seen.append(local)

    threads = [threading.Thread(target=publisher), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert seen == sorted(seen) and seen[-1] == 299


@pytest.mark.gpu
def test_cuda_publish_pull_on_streams():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    learner = Net().cuda()
    replica = copy.deepcopy(learner)
    pub = WeightPublisher(learner)
    ls, rs = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.no_grad():
        learner.a.weight.fill_(2.0)
    torch.cuda.current_stream().synchronize()
    pub.publish(learner, 3, stream=ls)
    assert pub.pull(replica, 0, reader_id=1, stream=rs) == 3
    rs.synchronize()
    assert torch.equal(replica.a.weight, learner.a.weight)
