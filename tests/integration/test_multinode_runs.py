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

import hub
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


FSDD_RECIPE = REPO / "recipes" / "audio" / "ast_tiny_fsdd.yaml"
# the largest families on FSDD cut small: digits 0 and 1, 10% of their training clips labelled, 16 frames a clip
# (the paper-sized models see 12 or 8 patches), no augmentation; 2 steps of 2 clips a process, then the test. SGD:
# AdamW would move a weight whose gradient is zero but for rounding (an attention key's bias) by a whole step of the
# learning rate in a direction the rounding picks, which the comparison with DDP would read as a difference
TINY_FSDD = ["optimizer.name=sgd", "optimizer.lr=0.01", "optimizer.weight_decay=0.0",
             "data.args.target_frames=16", "data.args.digits=[0,1]", "data.args.label_fraction=0.1",
             "data.args.freq_mask=0", "data.args.time_mask=0", "data.args.noise=0.0", "data.args.mixup=0.0",
             "data.args.tilt=0.0", "data.args.warp=0.0", "data.args.batch_size=2", "trainer.max_epochs=1",
             "trainer.limit_train_batches=2", "trainer.limit_val_batches=2", "trainer.ema_decay=null",
             "trainer.calibrate=false", "trainer.num_threads=1", "trainer.accelerator=cpu", "trainer.devices=2"]
LARGEST = {  # family -> its model.args
    "ast_base": "model.args={}",
    "ssast_base": "model.args={num_masked: 4}",  # below its 8 patches (only SSAST's pretext masks them)
}


def launch_processes(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m hub ARGS`` on one machine, Lightning starting ``trainer.devices`` processes."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    result = subprocess.run([sys.executable, "-m", "hub", *args, "--no-progress"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def fsdd_run(family: str, strategy: str, out: Path) -> Path:
    launch_processes(["train", str(FSDD_RECIPE), f"model.name={family}", LARGEST[family], *TINY_FSDD,
                      f"trainer.strategy={strategy}", f"output_dir={out}"])
    return next(out.rglob("metrics.json")).parent


@pytest.fixture(scope="module")
def fsdd_runs(tmp_path_factory):
    """``(family, strategy) -> run folder``, each trained once for the tests of this module."""
    runs: dict[tuple[str, str], Path] = {}

    def get(family: str, strategy: str) -> Path:
        if (family, strategy) not in runs:
            runs[family, strategy] = fsdd_run(family, strategy, tmp_path_factory.mktemp(f"{family}-{strategy}"))
        return runs[family, strategy]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("family", list(LARGEST))
def test_fsdp_shards_the_largest_families_over_2_processes(family, fsdd_runs):
    """Each FSDP process holds half of the parameters; the gathered weights agree on both processes and fill the
    checkpoint, ``model.safetensors`` and the card as a run of one process would."""
    run = fsdd_runs(family, "fsdp")
    replicas = json.loads((run / "metrics.json").read_text())["replicas"]
    assert replicas["strategy"] == "FSDP" and replicas["world_size"] == 2 and replicas["in_sync"]
    total, shards = replicas["parameters"], replicas["shard_parameters"]
    assert total > 80_000_000 and len(shards) == 2
    assert all(shard <= total // 2 + 1 for shard in shards) and sum(shards) >= total
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 2
    assert sum(v.numel() for k, v in checkpoint["state_dict"].items() if k.startswith("model.")) == total
    weights = load_state_dict(run / "model.safetensors", None)
    for key, value in weights.items():
        torch.testing.assert_close(value, checkpoint["state_dict"][f"model.{key}"], rtol=0, atol=0)
    model = hub.load_run(run)
    assert sum(p.numel() for p in model.parameters()) == total


@pytest.mark.slow
def test_fsdp_trains_ast_base_as_ddp_does(fsdd_runs):
    """2 CPU processes under FSDP against 2 under DDP, on the same batches (Lightning's sampler deals them alike):
    the weights gathered from FSDP's shards are DDP's to 1e-6 after 2 SGD steps (the same sums in another order:
    FSDP reduce-scatters the gradients where DDP all-reduces them), and so are the test metrics."""
    fsdp, ddp = fsdd_runs("ast_base", "fsdp"), fsdd_runs("ast_base", "ddp")
    a = load_state_dict(fsdp / "model.safetensors", None)
    b = load_state_dict(ddp / "model.safetensors", None)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    tested = [json.loads((run / "metrics.json").read_text())["test"] for run in (fsdp, ddp)]
    assert tested[0] == pytest.approx(tested[1], rel=0, abs=1e-5)
