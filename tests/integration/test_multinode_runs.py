"""Training across machines, run on this one: 2 nodes x 1 process (Lightning's DDP over gloo on CPU, each node a
process of its own started with ``NODE_RANK`` 0 or 1 and the master on 127.0.0.1, as on two machines), resumed across
the nodes, and checked against one process with the same global batch; then FSDP of the largest audio families on 2
processes. The commands are those of docs/recipes.md, "Several machines"."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hub.core.weights import load_state_dict

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
# the quickstart's cct_digits on scikit-learn's digits: 4 steps an epoch, validated every epoch; the learning rate is
# still warming up (3 epochs), so a run of 1 epoch resumed to 2 trains as one of 2 epochs
SHORT = ["trainer.limit_train_batches=4", "trainer.check_val_every_n_epoch=1"]
PER_PROCESS_BATCH = 32  # 2 processes x 32: the global batch of 64 that the single process takes at once
# launcher variables of the test's own process that would tell a node another rank than its NODE_RANK
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_nodes(args: list[str], nodes: int = 2, timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """``python -m hub ARGS`` once per node, as each machine would run it (docs/recipes.md): ``NODE_RANK`` 0 .. 1,
    the master (node 0) on 127.0.0.1 at a free port, one process a node (``trainer.devices=1``)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nodes))
    distributed = ["trainer.strategy=ddp", "trainer.accelerator=cpu", "trainer.devices=1", f"trainer.num_nodes={nodes}"]
    procs = [subprocess.Popen([sys.executable, "-m", "hub", *args, *distributed, "--no-progress"], cwd=REPO,
                              env={**env, "NODE_RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for rank in range(nodes)]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, result in enumerate(results):
        assert result.returncode == 0, f"node {rank}: {result.stderr[-3000:]}"
    return results


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The quickstart on 2 nodes for 1 epoch, then resumed on 2 nodes to 2 epochs: the run folder and each launch's
    per-node results."""
    out = tmp_path_factory.mktemp("nodes")
    first = launch_nodes(["train", str(QUICKSTART), *SHORT, "trainer.max_epochs=1",
                          f"data.args.batch_size={PER_PROCESS_BATCH}", f"output_dir={out}"])
    runs = [p.parent for p in out.rglob("recipe.yaml")]
    assert len(runs) == 1, f"one run folder expected, found {runs}"
    first_rows = (runs[0] / "metrics.csv").read_text().strip().splitlines()
    resumed = launch_nodes(["train", "--resume", str(runs[0]), "trainer.max_epochs=2"])
    return {"out": out, "run": runs[0], "first": first, "resumed": resumed, "first_rows": first_rows}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The same 2 epochs on 1 node of 1 process, with the global batch of the 2 nodes. Under DDP as well: Lightning
    then deals out the epoch's order as it does to 2 processes (its distributed sampler reshuffles the data's own
    seeded order by its seed and epoch), while a run without a data-parallel strategy reads the data's order as it
    is, so its batches are others (docs/recipes.md, "Several processes and machines")."""
    out = tmp_path_factory.mktemp("single")
    launch_nodes(["train", str(QUICKSTART), *SHORT, "trainer.max_epochs=2",
                  f"data.args.batch_size={2 * PER_PROCESS_BATCH}", f"output_dir={out}"], nodes=1)
    return next(out.rglob("metrics.json")).parent


@pytest.mark.slow
def test_two_nodes_write_one_run_folder_once_and_resume_in_it(two_nodes):
    run = two_nodes["run"]
    assert [p.parent for p in two_nodes["out"].rglob("recipe.yaml")] == [run]  # the resumed run made no other
    assert len(two_nodes["first_rows"]) == 2  # header and epoch 0
    rows = (run / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 3 and rows[:2] == two_nodes["first_rows"]
    for launch in ("first", "resumed"):  # node 0 reports the run folder; node 1 prints nothing of it
        node0, node1 = two_nodes[launch]
        assert node0.stdout.count(f"run folder: {run}") == 1, node0.stdout
        assert "run folder" not in node1.stdout, node1.stdout
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["replicas"] == {"world_size": 2, "in_sync": True, "strategy": "DDPStrategy"}
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["epoch"] == 1 and checkpoint["global_step"] == 8


@pytest.mark.slow
def test_two_nodes_match_one_process_with_the_same_global_batch(two_nodes, one_process):
    """Each step of the 2 nodes averages the gradients of the two halves of the batch that the single process takes
    whole (Lightning's distributed sampler deals the epoch's order out in turn), so the runs differ only in the order
    of float32 sums: the gradients' all-reduce against one batch's mean. Tolerance 1e-5 on the weights after 8 AdamW
    steps and on the metrics (measured: 9e-7 on the weights; the metrics equal to 3e-7): AdamW divides each step by
    the root of its running squared gradient, which can scale such rounding up for gradients near zero, while a run
    on other batches differs by about 1e-3 (one step at the learning rate) in every tensor, and by 0.07 in its
    training accuracy."""
    nodes, single = two_nodes["run"], one_process
    a = load_state_dict(nodes / "model.safetensors", None)
    b = load_state_dict(single / "model.safetensors", None)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5)
    rows_nodes = (nodes / "metrics.csv").read_text().strip().splitlines()
    rows_single = (single / "metrics.csv").read_text().strip().splitlines()
    header = rows_nodes[0].split(",")
    assert header == rows_single[0].split(",")
    for line_nodes, line_single in zip(rows_nodes[1:], rows_single[1:]):
        for key, x, y in zip(header, line_nodes.split(","), line_single.split(",")):
            assert float(x) == pytest.approx(float(y), rel=0, abs=1e-5), key
    test_nodes = json.loads((nodes / "metrics.json").read_text())["test"]
    test_single = json.loads((single / "metrics.json").read_text())["test"]
    assert test_nodes == pytest.approx(test_single, rel=0, abs=1e-5)
