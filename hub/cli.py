"""``attnhub``: list, inspect, train, evaluate, fine-tune, predict with and publish hub models.

Run ``attnhub COMMAND --help`` for the options of each command.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import os
import sys
import warnings
from functools import partial
from pathlib import Path

from hub.errors import HubError
from hub.reproduction import ABSOLUTE_TOLERANCE

EPILOG = ("Examples:\n  attnhub train recipes/quickstart.yaml trainer.max_epochs=5"
          "\n  attnhub predict vit_digits.sklearn digit.png"
          "\n  attnhub finetune tabr --data my.csv --target label"
          "\n  attnhub predict RUN_DIR --data rows.csv --out preds.csv"
          "\n  attnhub publish RUN_DIR --name vit_digits.mine --to-hf alice/vit-digits"
          "\n  attnhub predict hf-hub:alice/vit-digits digit.png")
NO_PROGRESS = dict(action="store_true", help="hide progress bars")


def _format_params(count: int | None) -> str:
    if count is None:
        return "-"
    return f"{count / 1e6:.2f}M" if count >= 1e6 else f"{count / 1e3:.1f}k"


def cmd_list(args) -> int:
    from hub.core.index import family_rows

    rows = [("name", "domain", "task", "params", "pretrained", "headline metric")]
    for r in family_rows(args.pattern, domain=args.domain, task=args.task, pretrained=args.pretrained):
        tags = ", ".join(tag.removeprefix(r["name"] + ".") for tag in r["tags"])
        rows.append((r["name"], r["domain"], r["task"], _format_params(r["params"]), tags or "-", r["metric"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def cmd_info(args) -> int:
    from hub.core.index import describe

    print(json.dumps(describe(args.name), indent=2))
    return 0


def _print_run(run_dir: Path, seconds: float | None = None) -> None:
    """The run's test metrics, best monitored epoch and folder; with ``seconds`` (the wall time of the whole
    command), how long training took: the epochs' fit (``metrics.json``'s ``fit_seconds``) and the rest (data,
    model, test, calibration and OOD statistics)."""
    summary = json.loads((run_dir / "metrics.json").read_text())
    for key, value in summary.get("test", {}).items():
        print(f"{key}: {value:.4f}")
    print(f"best {summary['best']['monitor']}: {summary['best']['value']} (epoch {summary['best']['epoch']})")
    if seconds is not None and "fit_seconds" in summary:
        epochs = summary["final"].get("epoch", -1) + 1
        print(f"wall time: {seconds:.1f} s ({summary['fit_seconds']:.1f} s fitting, to epoch {epochs}; the rest: data, "
              "model, test, calibration, OOD statistics)")
    print(f"run folder: {run_dir}")


def cmd_train(args) -> int:
    import time

    from hub.run.train import is_ddp_worker, train

    start = time.perf_counter()
    recipe, overrides = args.recipe, list(args.overrides)
    if args.resume and recipe is not None and "=" in recipe and not Path(recipe).exists():
        recipe, overrides = None, [recipe, *overrides]  # `train --resume RUN_DIR key=value ...`: overrides alone
    overrides += [f"output_dir={args.output_dir}"] if args.output_dir else []
    run_dir = train(recipe, overrides, resume=args.resume, progress=not args.no_progress)
    if is_ddp_worker():
        _end_worker()
    _print_run(run_dir, time.perf_counter() - start)
    return 0


def _end_worker() -> None:
    """A data-parallel worker (global rank > 0) ends as soon as its part is done, without the interpreter's
    teardown: gloo's threads may still hold tensors then, whose release during teardown can abort the process
    ("terminate called without an active exception", seen once in 3 FSDP runs on CPU; pytorch/pytorch#179291), and
    Lightning's launcher answers a worker's failure by killing rank zero, mid-test."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _print_policy(choice: dict) -> None:
    """The candidates a fine-tune trained (``metrics.json``'s ``policy``), their validation metric, and which was
    kept: the run folder printed next, the one to pass to ``predict``."""
    print(f"fine-tune policy: {choice['chosen']} kept on the validation split (asked: {choice['asked']}); its run "
          "folder, below, is the one to pass to predict. Candidates:")
    for policy, c in choice["candidates"].items():
        value = f"{c['metric']} {c['value']:.4f}" if c["value"] is not None else "not measured"
        notes = (", still improving at its last epoch" if c["still_improving"] else "") + \
            (", kept" if policy == choice["chosen"] else "")
        print(f"  {policy}: {value} after {c['epochs']} epochs{notes}, in {c['run']}")


def cmd_finetune(args) -> int:
    from hub.crossval import format_cv
    from hub.finetune import finetune, format_comparison
    from hub.kinds import kind_options
    from hub.predictor import format_predictor
    from hub.run.train import is_ddp_worker

    options = {option.name: getattr(args, option.name) for option in kind_options()}  # None: not given
    run_dir, comparison = finetune(args.name, args.data, args.overrides, args.output_dir, not args.no_progress,
                                   policy=args.policy, budget_minutes=args.budget_minutes, report=print,
                                   predictor=args.predictor, cv_folds=args.cv_folds,
                                   memory_tokens=args.memory_tokens, **options)
    if is_ddp_worker():
        _end_worker()
    summary = json.loads((run_dir / "metrics.json").read_text())
    if "policy" in summary:
        _print_policy(summary["policy"])
    _print_run(run_dir)
    if comparison is not None:
        print(format_comparison(run_dir, comparison))
    if "predictor" in summary:
        kept = summary["predictor"]
        print(format_cv(kept, (kept["test"] or {}).get("chosen")) if kept.get("selection") == "cross-validation"
              else format_predictor(kept))
    return 0


def cmd_calibrate(args) -> int:
    from hub.uncertainty.calibration import calibrate, format_report

    print(format_report(calibrate(args.name, args.overrides, alpha=args.alpha, progress=not args.no_progress)))
    return 0


def cmd_reproduce(args) -> int:
    from hub.reproduction import format_report, parse_seeds, reproduce

    report = reproduce(args.name, seeds=parse_seeds(args.seeds) if args.seeds else None, overrides=args.overrides,
                       output_dir=args.output_dir, tolerance=args.tolerance, progress=not args.no_progress)
    print(format_report(report))
    return 0


def cmd_eval(args) -> int:
    from hub.run.evaluate import evaluate

    for key, value in evaluate(args.name, args.overrides, progress=not args.no_progress).items():
        print(f"{key}: {value:.4f}")
    return 0


def _open_out(path: str | None):
    """``--out``: the CSV file to write to, or (no path) a context that gives None."""
    return open(path, "w", newline="") if path else contextlib.nullcontext()


def cmd_predict(args) -> int:
    from hub.deploy.predict import check_table_input, for_inference, table_predictions, write_csv
    from hub.deploy.tasks import task_model
    from hub.models import load

    if bool(args.files) == bool(args.data):
        raise HubError("give input FILES, or --data TABLE.csv for a tabular model (not both)")
    model = for_inference(task_model(load(args.name), args.task, args.name))
    if not args.data:
        _print_file_predictions(model, args)
        return 0
    check_table_input(model.pretrained_cfg, args.name)
    with _open_out(args.out) as out_file:
        count = write_csv(table_predictions(model, args.data, args.batch_size, args.interval_level),
                          out_file or sys.stdout)
    if args.out:
        print(f"wrote {count} predictions to {args.out}")
    return 0


def _print_file_predictions(model, args) -> None:
    """One line per input file (a regression's output names first), also written to ``--out`` when given."""
    from tqdm import tqdm

    from hub.deploy.predict import file_predictions, shown_row

    regression = not model.pretrained_cfg.label_names  # no classes: outputs are values (RUL, speeds, risks)
    with _open_out(args.out) as out_file, tqdm(total=len(args.files), unit="file", disable=args.no_progress,
                                               file=sys.stderr) as bar:
        writer = csv.writer(out_file) if out_file else None
        wrote_header = False
        for header, rows in file_predictions(model, args.files, args.batch_size, args.top_k, args.interval_level):
            if not wrote_header:  # tqdm does not count when disabled, so keep a flag
                if writer:
                    writer.writerow(header)
                if regression:  # the outputs' names (rul, rul_plus_1, ...; speed_5min, ...; risk)
                    print("  ".join(header))
                wrote_header = True
            answered = header[-1] == "predictor"  # who answered each row, where the card keeps a guard
            for row in rows:
                shown = shown_row(row[:-1] if answered else row, regression, ood="ood" in header[-2:])
                print("  ".join(shown + row[-1:] if answered else shown))
                if writer:
                    writer.writerow(row)
            bar.update(len(rows))


def cmd_serve(args) -> int:
    from hub.deploy.serve import Limits, serve

    limits = Limits(max_upload_mb=args.max_upload_mb, timeout_s=args.timeout_s, max_queue=args.max_queue,
                    token=args.token)
    serve(args.name, host=args.host, port=args.port, max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms,
          limits=limits, verbose=args.verbose)
    return 0


def cmd_explain(args) -> int:
    from hub.core.cards import PretrainedCfg
    from hub.kinds import explain_inputs
    from hub.models import load

    model = load(args.name).eval()
    card = getattr(model, "pretrained_cfg", None)
    if not isinstance(card, PretrainedCfg):
        raise HubError(f"{args.name} has no card of this hub saying what data it takes (a family without weights, or "
                       "a timm model): explain a pretrained tag (attnhub list --pretrained) or a run folder")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in explain_inputs(card, model, args.inputs, out_dir, data=args.data, target=args.target):
        print(path)
    return 0


def _benchmark_report():
    """:mod:`benchmarks.report` of a source checkout: importable, or in the working directory (``attnhub``'s
    console script does not search the working directory). The benchmarks are not installed with
    the hub."""
    import importlib
    import importlib.util

    try:
        return importlib.import_module("benchmarks.report")
    except ModuleNotFoundError as err:
        if err.name not in ("benchmarks", "benchmarks.report"):
            raise
    init = Path.cwd() / "benchmarks" / "__init__.py"
    if not (init.parent / "report.py").is_file():
        raise HubError("attnhub bench runs from the root of a source checkout of Attention Hub (the benchmarks "
                       f"package is not installed with the hub), and {Path.cwd().name}/ has no benchmarks/report.py; "
                       "cd to the checkout, or run `python -m benchmarks.run_all` there")
    spec = importlib.util.spec_from_file_location("benchmarks", init)  # a package: its folder is searched
    package = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("benchmarks.report")


def cmd_bench(args) -> int:
    report = _benchmark_report()
    print(report.run(args.pattern, recipes_dir=args.recipes, out_dir=args.out, steps=args.steps, device=args.device,
                     progress=not args.no_progress, import_repeats=args.import_repeats))
    return 0


def cmd_publish(args) -> int:
    from hub.deploy.publish import publish

    card_path = publish(args.runs, args.name, dest=args.dest, notes=args.notes, paper=args.paper,
                        add_seeds=args.add_seeds)
    print(f"{'added seeds to' if args.add_seeds else 'published'} {args.name}: {card_path}")
    if args.to_hf:
        from hub.deploy.hf import upload

        print(f"uploaded to the Hugging Face Hub: {upload(card_path, args.to_hf, license_id=args.license)}")
    return 0


def cmd_export(args) -> int:
    from hub.deploy.exporter import export

    path = export(args.name, args.format, args.out, model_only=args.model_only)
    print(f"wrote {path} with card.json and preprocess.json beside it")
    return 0


def _add_kind_options(p: argparse.ArgumentParser) -> None:
    """The options of every registered input kind (:attr:`hub.kinds.InputKind.options`; imports every domain)."""
    from hub.kinds import kind_options

    for option in kind_options():
        p.add_argument(f"--{option.name.replace('_', '-')}", dest=option.name, type=option.type,
                       choices=option.choices, help=option.help)


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is not an option), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


def _add_list(sub) -> None:
    from hub.core.registry import CORE_DOMAIN, domain_packages

    p = sub.add_parser("list", help="list registered models in a table")
    p.add_argument("pattern", nargs="?", help="glob over names, e.g. 'vit_*'")
    p.add_argument("--domain", help=f"only this domain ({', '.join([*domain_packages(), CORE_DOMAIN])})")
    p.add_argument("--task", help="only this task, e.g. image-classification")
    p.add_argument("--pretrained", action="store_true", help="only families with shipped weights")
    p.set_defaults(fn=cmd_list)


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="show a model card (family.tag or run folder) or a family's arguments")
    p.add_argument("name", help="family, family.tag or run folder")
    p.set_defaults(fn=cmd_info)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train a recipe into a new run folder (its path is printed last)")
    p.add_argument("recipe", nargs="?", help="recipe YAML file (omit with --resume: overrides then apply to the run's "
                   "recipe, e.g. `--resume RUN_DIR trainer.max_epochs=20`)")
    p.add_argument("overrides", nargs="*", help="recipe overrides key.path=value, e.g. trainer.max_epochs=5")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue this run from its checkpoints/last.ckpt")
    p.add_argument("--output-dir", help="where the run folder goes (default: the recipe's output_dir, ./runs)")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_train)


def _add_finetune(sub, kind_options: bool = True) -> None:
    """With ``kind_options``, the options of every input kind (which imports every domain)."""
    p = sub.add_parser("finetune", help="fine-tune a pretrained model on your own data, or train a family from "
                       "scratch on it; a classical baseline is fitted on the same split and printed beside the result")
    p.add_argument("name", help="pretrained tag or run folder to start from, or a bare family (e.g. tabr, gat, "
                   "timbre_attention, survival_fusion, rul_attention, traffic_gru, tfcam) trained from scratch with "
                   "its input kind's default recipe")
    p.add_argument("--data", required=True, help="your data: an image folder (one sub-folder per class; for slot "
                   "autoencoders any folder of unlabelled images, split 80/10/10), a CSV table with a header (tabular "
                   "models; split 70/15/15 automatically), a graph folder (nodes.csv, edges.csv; the features "
                   "row-normalised when all are non-negative, data.args.normalize=true/false to force), ...")
    if kind_options:
        _add_kind_options(p)
    p.add_argument("--policy", choices=("auto", "linear-probe", "full", "lp-ft", "full-recipe-lr", "memory"),
                   default="auto",  # finetune.POLICIES
                   help="from a pretrained tag: 'linear-probe' trains the classifier alone; 'full' trains everything, "
                        "the backbone at a tenth of the learning rate (layer-wise decayed for timm models); 'lp-ft' "
                        "trains a linear probe, then the full fine-tune from it; 'full-recipe-lr' trains everything at "
                        "the card's own learning rate; 'memory' (transformers of timm Blocks: ViT, CCT, AST) freezes "
                        "the whole model, which keeps answering its own task exactly, and trains memory tokens per "
                        "block, a new class token and head for yours (predict --task new|source|both); 'auto' "
                        "(default) trains the linear probe and LP-FT (the full "
                        "fine-tune for families without a classifier), and from 50 training examples per class "
                        "full-recipe-lr too, each in its own run folder, and keeps the best on the validation split. "
                        "Each run's budget is printed before training. A bare family trains from scratch")
    p.add_argument("--predictor", choices=("auto", "model", "baseline", "blend"), default="auto",  # PREDICTORS
                   help="what predict uses where the data's classical baseline can predict (tables, survival "
                        "tables, RUL sensor units, image and audio folders): 'auto' (default) the best on the "
                        "validation split of the model, the baseline and their blend (one weight on the model's "
                        "probabilities, values or rank-normalised risks, ties to the model); or force one")
    p.add_argument("--cv-folds", type=int, default=5,  # crossval.CV_FOLDS
                   help="below 5,000 labelled items (crossval.CV_BELOW; graph folders, tables, survival tables, "
                        "image, audio and ICU stays folders, RUL sensor units, traffic folders), choose the predictor "
                        "by this many folds of cross-validation on every labelled item outside the test split "
                        "(stratified by class; grouped with --groups), then refit the choice on every labelled "
                        "item for predict, serve and export (default 5; the k fold runs and the refit are printed "
                        "before they start); 0 turns it off: the choice on the validation split")
    p.add_argument("--memory-tokens", type=int, default=5, metavar="N",  # finetune.MEMORY_TOKENS
                   help="--policy memory: learnable memory tokens per transformer block (default 5)")
    p.add_argument("--budget-minutes", type=float, default=30.0,  # finetune.FINETUNE_BUDGET_MINUTES
                   help="from a pretrained tag: each run's time budget in minutes (default 30)")
    p.add_argument("--output-dir", help="where the run folder goes (default ./runs)")
    p.add_argument("overrides", nargs="*", help="recipe overrides key.path=value, e.g. trainer.max_epochs=20")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_finetune)


def _add_reproduce(sub) -> None:
    p = sub.add_parser("reproduce", help="retrain a pretrained tag from its card's recipe and print the new test "
                       "metrics beside the card's mean ± std, with a verdict per metric")
    p.add_argument("name", help="pretrained tag, e.g. gat.cora")
    p.add_argument("overrides", nargs="*", help="recipe overrides applied after the card's, e.g. trainer.max_epochs=5")
    p.add_argument("--seeds", help="seeds to train, comma-separated, e.g. 1,2,3 (default: the card's first seed)")
    p.add_argument("--output-dir", help="where the run folders go (default ./runs)")
    p.add_argument("--tolerance", type=float, default=ABSOLUTE_TOLERANCE, help="allowed absolute difference for a "
                   f"metric whose card has one seed or std 0 (default {ABSOLUTE_TOLERANCE}); otherwise within 2 std")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_reproduce)


def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="test a pretrained tag or run folder on the data its card names")
    p.add_argument("name", help="pretrained tag or run folder")
    p.add_argument("overrides", nargs="*", help="data overrides, e.g. data.args.batch_size=256")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_eval)


def _add_calibrate(sub) -> None:
    p = sub.add_parser("calibrate", help="temperature scaling, calibration error and trust scores of a classifier: "
                       "fitted on its validation split, measured on its test split; a run folder keeps the "
                       "temperature in its card (predict then gives calibrated probabilities)")
    p.add_argument("name", help="pretrained tag or run folder of a classifier")
    p.add_argument("overrides", nargs="*", help="data overrides, e.g. data.args.batch_size=256")
    p.add_argument("--alpha", type=float, default=0.0, help="trust score's density filter: the fraction of each "
                   "class's reference points dropped as outliers (by the distance to their 10th neighbour; default 0)")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_calibrate)


def _add_predict(sub) -> None:
    p = sub.add_parser("predict", help="predict files, one line per file: name, then top-k classes and probabilities "
                       "(regression models: the predicted values)")
    p.add_argument("name", help="pretrained tag, run folder, or hf-hub:OWNER/REPO[@REVISION] (a Hugging Face Hub "
                   "repository written by publish --to-hf, downloaded into its cache; HUB_OFFLINE=1 or "
                   "HF_HUB_OFFLINE=1: the cache only)")
    p.add_argument("files", nargs="*", help="input files (images, ...)")
    p.add_argument("--data", help="tabular models: a CSV of rows to predict (the target column may be absent); "
                   "writes row, prediction and proba_<class> per class")
    p.add_argument("--top-k", type=int, default=3, help="how many classes to print per file (default 3)")
    p.add_argument("--out", help="also write the predictions to this CSV file")
    p.add_argument("--batch-size", type=int, default=256, help="files per forward pass (default 256)")
    p.add_argument("--task", choices=("new", "source", "both"), default="new",  # hub.deploy.tasks.TASKS
                   help="a run fine-tuned with --policy memory answers two tasks: 'new' (default) its own classes, "
                        "'source' the classes of the model it started from (its outputs unchanged), 'both' the new "
                        "task's columns then the source's (source_class_1, source_prob_1, ...) from one forward pass")
    p.add_argument("--interval-level", type=float, help="regression and forecasts: the coverage of the interval "
                   "written beside each output (<output>_lower_90, <output>_upper_90), one the card holds: 0.8, 0.9 "
                   "(default) or 0.95")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_predict)


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over HTTP: POST /predict (uploaded files, or JSON rows for a "
                       "table model) answers what predict prints, batching requests that arrive together; GET /health")
    p.add_argument("name", help="pretrained tag or run folder")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only); "
                   "any other address requires a token (--token or ATTNHUB_TOKEN)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--max-batch-size", type=int, default=64, help="most inputs (files or rows) per model call "
                   "(default 64)")
    p.add_argument("--max-wait-ms", type=float, default=10.0, help="how long the first request of a batch waits "
                   "for others to join it (default 10)")
    p.add_argument("--max-upload-mb", type=float, default=16.0, help="largest request body in MiB; a larger one is "
                   "answered 413 before it is read whole (default 16)")
    p.add_argument("--timeout-s", type=float, default=30.0, help="longest a request may wait for its answer, queue "
                   "and model; longer is answered 504 (default 30)")
    p.add_argument("--max-queue", type=int, default=256, help="most requests waiting for the model; one more is "
                   "answered 503 with Retry-After (default 256)")
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on /predict, /explain and /models "
                   "(default: the ATTNHUB_TOKEN environment variable; required when --host is not loopback). "
                   "Prefer the variable: a command line is visible to other users of the machine")
    p.set_defaults(fn=cmd_serve)


def _add_explain(sub) -> None:
    p = sub.add_parser("explain", help="draw what decided a model's output, with its numbers: the family's attention "
                       "(ViT/CCT rollout, CoaT factorised attention, CBAM and halo maps over images, attention over "
                       "spectrograms, graph attention on edges, column attention, attention over time), else "
                       "attribution from Captum (Integrated Gradients, feature ablation); the title names the method. "
                       "Each X.png gets X.npy (the map) and X.json (method, class and its probability, input, family)")
    p.add_argument("name", help="pretrained tag or run folder")
    p.add_argument("inputs", nargs="*", help="what to explain: image or audio files; node ids (graph models); 1-based "
                   "row numbers (tabular models, survival models' --data); test unit numbers (RUL models); test "
                   "sample numbers (TESTAM); test stay numbers (TFCAM). Default: a few items of the card's test data")
    p.add_argument("--data", help="graph models: a graph folder (nodes.csv, edges.csv) the node ids refer to; tabular "
                   "models: a CSV of raw rows the row numbers refer to (default: the card's dataset); survival "
                   "models: a CSV of patients (required)")
    p.add_argument("--target", help="explain this class (a class name or number) instead of the top one; as the "
                   "attention maps are the same for every class, the map is then attribution from Captum")
    p.add_argument("--out", default="explanations", help="folder for the figures (default ./explanations)")
    p.set_defaults(fn=cmd_explain)


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="export a model to ONNX or torch.export (.pt2) with a dynamic batch, its "
                       "card.json and preprocess.json; checked against PyTorch at batch 1 and 3")
    p.add_argument("name", help="pretrained tag, run folder, or family (untrained; its input must be inferable)")
    p.add_argument("--format", required=True, choices=("onnx", "pt2"), help="onnx (onnxruntime) or pt2 (torch.export)")
    p.add_argument("--out", help="folder for the files (default ./exports/NAME-FORMAT)")
    p.add_argument("--model-only", action="store_true",
                   help="export the network alone when the run's predictor is its baseline or a blend (default: the "
                        "predictor, where its baseline can be exported)")
    p.set_defaults(fn=cmd_export)


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="measure every registered model on its recipe's data: FLOPs, items/s, memory, "
                       "%% of the machine's GEMM peak, ratios against timm / PyG references; "
                       "writes RESULTS.md and RESULTS.json; runs from the root of a source checkout")
    p.add_argument("pattern", nargs="?", default="*", help="globs over family names, comma-separated, e.g. "
                   "'vit_*,gat' (default: all)")
    p.add_argument("--recipes", default="recipes",
                   help="folder of recipes to take data and models from (default ./recipes)")
    p.add_argument("--out", default="benchmarks/results",
                   help="folder for RESULTS.md and RESULTS.json (default ./benchmarks/results)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per model, after 2 warm-up steps (default 5)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--import-repeats", type=int, default=5, help="rounds of fresh processes timing `import torch`, "
                   "`import hub`, `attnhub list`, `attnhub info` and `attnhub --help` (default 5; medians)")
    p.add_argument("--no-progress", **NO_PROGRESS)
    p.set_defaults(fn=cmd_bench)


def _add_publish(sub) -> None:
    p = sub.add_parser("publish", help="turn run folders into packaged safetensors weights and a model card; "
                       "--to-hf also uploads them to the Hugging Face Hub")
    p.add_argument("runs", nargs="+", help="run folders of one recipe with different seeds; weights from the first")
    p.add_argument("--name", required=True, help="family.tag to publish as, e.g. vit_digits.sklearn")
    p.add_argument("--dest", help="folder for the files (default: the family's domain package pretrained/)")
    p.add_argument("--notes", default="", help="free text for the card (how the epoch was picked, ...)")
    p.add_argument("--paper", action="append", default=[], metavar="METRIC=VALUE",
                   help="the paper's figure for a metric, e.g. test/acc=0.83 (repeatable)")
    p.add_argument("--add-seeds", action="store_true",
                   help="add these runs' test metrics (more seeds of the card's recipe) to the already published "
                        "card NAME, keeping its weights; --notes, if given, replaces the card's notes")
    p.add_argument("--to-hf", metavar="OWNER/REPO", help="then upload the published card (as card.json), its weights, "
                   "its OOD statistics and a generated README.md model card to this Hugging Face Hub model repository "
                   "(created if missing; token from HF_TOKEN or `hf auth login`, server from HF_ENDPOINT); load it "
                   "with hf-hub:OWNER/REPO")
    p.add_argument("--license", default="apache-2.0", help="with --to-hf: the licence id in the README's metadata "
                   "(default apache-2.0, the hub's; the dataset's licence is on the card)")
    p.set_defaults(fn=cmd_publish)


def build_parser(kind_options: bool = True) -> argparse.ArgumentParser:
    """The parser of ``attnhub``; with ``kind_options``, ``finetune`` takes the options of every input kind (which
    imports every domain: ``main`` asks for them only to run or show ``finetune``)."""
    parser = argparse.ArgumentParser(prog="attnhub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help="show debug logs and full tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_list, _add_info, _add_train, partial(_add_finetune, kind_options=kind_options), _add_reproduce,
                _add_eval, _add_calibrate, _add_predict, _add_serve, _add_explain, _add_export, _add_bench,
                _add_publish):  # in the order --help lists them
        add(sub)
    return parser


# the loggers that Lightning gives a handler of their own when imported before the root logger has one
LIGHTNING_LOGGERS = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric")


def _configure_logging(verbose: bool) -> None:
    """Debug logs with ``--verbose``; else warnings only, without Lightning's tips and trainer chatter (it resets its
    loggers to INFO when imported, later, so the filter sits on the handler; imported before a root handler existed,
    e.g. by a script calling :func:`main`, it has a handler of its own, quietened too); progress bars stay."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not verbose:
        for name in ("", *LIGHTNING_LOGGERS):
            for handler in logging.getLogger(name).handlers:
                handler.setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message=".*treespec.*")  # Lightning 2.6 about torch's own pytree API


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed. A command's trailing list (key=value overrides, input files) may follow options
    (`finetune NAME --data D trainer.max_epochs=2`, `predict NAME --out p.csv a.png b.png`), which argparse cannot
    split between a subcommand's positionals; they are collected here."""
    parser = build_parser(kind_options=_command(argv) == "finetune")
    args, extra = parser.parse_known_args(argv)
    if extra:
        target = next((name for name in ("overrides", "files", "inputs") if hasattr(args, name)), None)
        if target is None or any(e.startswith("-") or (target == "overrides" and "=" not in e) for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        setattr(args, target, [*getattr(args, target), *extra])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    _configure_logging(args.verbose)
    try:
        return args.fn(args)
    except HubError as err:
        if args.verbose:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
