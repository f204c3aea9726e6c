"""``attnhub serve``: a pretrained tag or run folder behind HTTP, answering what ``attnhub predict`` prints.

- ``POST /predict``: for a model of input files (images, WAV files, sensor CSVs, ...) a multipart upload of the
  files (``curl -F files=@digit.png ...``); for a table model (an input kind of form ``InputForm.ROWS``) a JSON body
  ``{"rows": [{column: value, ...}, ...]}``. The answer is ``{"model": NAME, "predictions": [{column: cell, ...}]}``,
  one object per prediction with the columns and cells of ``attnhub predict --out``'s CSV: ``file`` (the uploaded
  file's name), then ``class_1``, ``prob_1``, ... (``?top_k=3``) or the card's output names; for a table ``row``
  (1-based), ``prediction`` and ``proba_<class>`` (or the target's column). Bad input is answered with HTTP 422
  and the :class:`~hub.errors.HubError`'s text, naming the uploaded file; a malformed request with HTTP 400.
- ``GET /health``: ``{"status": "ok", "model": NAME, "kind": KIND, "requests": n, "batches": m}``.

Every request's inputs are written to a temporary folder of its own and read by the same readers as ``predict``
(:func:`hub.kinds.predict_logits`, :mod:`hub.deploy.predict`), and answered by the card's predictor as ``predict`` is
(the model, or its input kind's baseline or their blend: :mod:`hub.predictor`). Dynamic batching: requests wait in an
asyncio queue; one worker task takes those that arrive within ``max_wait_ms`` of the first, up to ``max_batch_size``
inputs, and runs the model on them in a thread, so the event loop keeps accepting requests meanwhile. Kinds of one
prediction per file (``InputForm.FILE_EACH``, :class:`hub.kinds.InputForm`) go through one model call per batch; the
other kinds read each request's table, graph or speed file on its own (their readers infer a file's column types
from that file alone), so a batch calls the model once per request. A batch that fails is run again request by
request, so a bad file fails its own request only. Probabilities equal ``predict``'s up to float rounding: a CPU
matrix product rounds differently for different batch sizes (so does ``predict --batch-size``), which moves a
probability's 6th decimal now and then.

FastAPI and uvicorn rather than LitServe: LitServe (0.2) answers every request of a batch with the error when one
request of it fails, counts a batch in requests rather than inputs, and runs the model in worker processes of its
own; here a bad file must fail its own request only and a batch is counted in files or rows.
"""
# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations (``Request``, imported in
# build_app) as objects.
import asyncio
import csv
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hub.deploy.predict import (
    file_predictions,
    predicted_values,
    predictor_mix,
    row_predictors,
    table_predictions,
    value_cells,
)
from hub.errors import DataError, HubError
from hub.kinds import InputForm, kind_of, kinds_supporting, predict_logits
from hub.uncertainty.ood import HEADER as OOD_HEADER
from hub.uncertainty.ood import PredictionScorer

log = logging.getLogger(__name__)

ROWS_NAME = "rows.csv"  # a table request's JSON rows, written as CSV for the table reader


@dataclass
class Job:
    """One request: its input paths on disk (``paths``, in its own ``folder``), the names the client knows them by
    (``shown``: path -> uploaded name), how many inputs it counts for in a batch, and, once queued, the future of its
    answer."""
    folder: Path
    paths: list[Path]
    shown: dict[str, str]
    size: int
    top_k: int
    future: asyncio.Future | None = field(default=None, repr=False)

    def client_text(self, text: str) -> str:
        """``text`` with this job's temporary paths replaced by the names the client sent."""
        for path, name in self.shown.items():
            text = text.replace(path, name)
        return text.replace(f"{self.folder}/", "").replace(str(self.folder), "the request")


class BatchingPredictor:
    """The model, the request queue and the worker task that batches it (see the module's docstring)."""

    def __init__(self, model, max_batch_size: int, max_wait_ms: float):
        if max_batch_size < 1 or max_wait_ms < 0:
            raise HubError(f"--max-batch-size must be >= 1 and --max-wait-ms >= 0, got {max_batch_size} and "
                           f"{max_wait_ms}")
        self.model, self.card = model, model.pretrained_cfg
        self.kind = self.card.input_spec.get("kind")
        self.form = kind_of(self.card).input_form  # how requests give the inputs, and whether they batch
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.requests = self.batches = 0
        # OOD columns of batched file requests, as predict writes them (None: the card has no OOD statistics)
        self.scorer = PredictionScorer.for_model(model)

    async def predict(self, job: Job) -> list[dict[str, str]]:
        """``job``'s predictions, once the worker has run its batch; raises what its inputs raised."""
        self.requests += 1
        job.future = asyncio.get_running_loop().create_future()
        await self.queue.put(job)
        return await job.future

    async def work(self) -> None:
        """Forever: take a batch of jobs off the queue and answer each (a job too big for one batch goes alone)."""
        loop = asyncio.get_running_loop()
        carried: Job | None = None
        while True:
            jobs = [carried or await self.queue.get()]
            carried, deadline = None, loop.time() + self.max_wait
            while sum(j.size for j in jobs) < self.max_batch_size and (wait := deadline - loop.time()) > 0:
                try:
                    job = await asyncio.wait_for(self.queue.get(), wait)
                except asyncio.TimeoutError:
                    break
                if sum(j.size for j in jobs) + job.size > self.max_batch_size:
                    carried = job
                    break
                jobs.append(job)
            self.batches += 1
            for job, answer in zip(jobs, await asyncio.to_thread(self.answers, jobs)):
                if job.future.done():  # a client that went away cancelled it
                    continue
                if isinstance(answer, Exception):
                    job.future.set_exception(answer)
                else:
                    job.future.set_result(answer)

    def answers(self, jobs: list[Job]) -> list[list[dict[str, str]] | Exception]:
        """Per job, its predictions or the error its inputs raised (in the worker thread)."""
        if self.form is InputForm.FILE_EACH and len(jobs) > 1:
            try:
                return self._batched(jobs)
            except Exception as err:  # some job's input: each job runs alone, to find which
                log.debug("a batch of %d requests failed (%s); running them one by one", len(jobs), err)
        answers = []
        for job in jobs:
            try:
                answers.append(self._alone(job))
            except Exception as err:  # the job's answer is its error; the server goes on
                answers.append(err)
        return answers

    def _batched(self, jobs: list[Job]) -> list[list[dict[str, str]]]:
        """One model call over the files of all ``jobs`` (kinds of one prediction per file, named by its path)."""
        paths = [str(p) for job in jobs for p in job.paths]
        batches, ood_cells = [], []
        with torch.inference_mode():
            for batch_names, batch_logits in predict_logits(self.card, self.model, paths, self.max_batch_size):
                batches.append((batch_names, batch_logits))
                if self.scorer is not None:  # scores the inputs of the model call that just ran
                    ood_cells.extend(self.scorer.cells(batch_logits))
        names = [name for batch_names, _ in batches for name in batch_names]
        if names != paths:
            raise HubError(f"the {self.kind!r} reader did not give one prediction per file, named by its path")
        logits = torch.cat([batch_logits for _, batch_logits in batches])
        flagged = [cell[-1] == "True" for cell in ood_cells] if self.scorer is not None else None
        values = predictor_mix(self.card, paths)(predicted_values(logits, self.card), flagged)  # the card's predictor's
        answered = row_predictors(self.card, flagged, len(values))  # where the card keeps a guard
        answers, start = [], 0
        for job in jobs:
            end = start + len(job.paths)
            header, cells = value_cells(values[start:end], self.card, job.top_k)
            if self.scorer is not None:
                header, cells = [*header, *OOD_HEADER], [[*c, *o] for c, o in zip(cells, ood_cells[start:end])]
            if answered is not None:
                header, cells = [*header, "predictor"], [[*c, a] for c, a in zip(cells, answered[start:end])]
            answers.append([self._named(job, ["file", *header], [str(path), *row])
                            for path, row in zip(job.paths, cells)])
            start = end
        return answers

    def _alone(self, job: Job) -> list[dict[str, str]]:
        paths = [str(p) for p in job.paths]
        if self.form is InputForm.ROWS:
            batches = table_predictions(self.model, paths[0], self.max_batch_size)
        else:
            batches = file_predictions(self.model, paths, self.max_batch_size, job.top_k)
        return [self._named(job, header, row) for header, rows in batches for row in rows]

    @staticmethod
    def _named(job: Job, header: list[str], row: list[str]) -> dict[str, str]:
        """A CSV row of :mod:`hub.deploy.predict` as ``{column: cell}``, its name cell in the client's words."""
        name, *cells = row
        return dict(zip(header, [job.client_text(name), *cells]))


def _write_rows(rows: Any, path: Path) -> int:
    """Write a table request's JSON ``rows`` (a list of ``{column: value}``) as the CSV ``predict --data`` would
    read; returns how many rows. Values are written as they are (``null`` leaves the cell empty: missing)."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise DataError('expected a JSON body {"rows": [{column: value, ...}, ...]} with at least one row')
    columns = list(dict.fromkeys(column for row in rows for column in row))
    for number, row in enumerate(rows, 1):
        nested = [c for c, v in row.items() if isinstance(v, (dict, list))]
        if nested:
            raise DataError(f"row {number}: columns {nested} hold a list or object; expected numbers, text or null")
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, columns)
        writer.writeheader()
        writer.writerows({c: "" if v is None else v for c, v in row.items()} for row in rows)
    return len(rows)


def load_served(name: str):
    """The model of a pretrained tag, run folder or Hub repository, checked to be one ``serve`` can answer for."""
    from hub.models import load
    from hub.names import resolve

    ref = resolve(name)
    if not ref.has_card:
        raise HubError(f"attnhub serve takes a pretrained tag (family.tag) or a run folder (or hf-hub:OWNER/REPO), "
                       f"got {name!r}: an untrained family has no card to say what input it takes")
    model = load(ref).eval()
    kind = kind_of(model.pretrained_cfg)
    if kind.name not in kinds_supporting("predict"):
        raise HubError(f"{name} takes inputs of kind {kind.name!r}, which has no reader for predictions "
                       f"(available: {kinds_supporting('predict')}); it cannot be served")
    return model


def build_app(model, name: str, max_batch_size: int = 64, max_wait_ms: float = 10.0):
    """The FastAPI application serving ``model`` (loaded from ``name``) with dynamic batching."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse
    except ModuleNotFoundError as err:
        raise _missing_package(err) from None
    from contextlib import asynccontextmanager

    predictor = BatchingPredictor(model, max_batch_size, max_wait_ms)

    @asynccontextmanager
    async def lifespan(app):
        worker = asyncio.create_task(predictor.work())
        yield
        worker.cancel()

    app = FastAPI(title=f"attnhub serve {name}", lifespan=lifespan)

    def refuse(status: int, text: str) -> JSONResponse:
        return JSONResponse({"detail": text}, status_code=status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": name, "kind": predictor.kind, "requests": predictor.requests,
                "batches": predictor.batches}

    @app.post("/predict")
    async def predict(request: Request, top_k: int = 3):
        if top_k < 1:
            return refuse(400, f"top_k must be >= 1, got {top_k}")
        folder = Path(tempfile.mkdtemp(prefix="attnhub-serve-"))
        try:
            try:
                job = await (_table_job(request, folder, top_k) if predictor.form is InputForm.ROWS
                             else _file_job(request, folder, top_k, predictor.kind, predictor.form))
            except DataError as err:
                return refuse(400, str(err))
            try:
                return {"model": name, "predictions": await predictor.predict(job)}
            except HubError as err:
                return refuse(422, job.client_text(str(err)))
            except Exception as err:  # an input no reader foresaw; the server goes on
                log.exception("request failed")
                return refuse(500, job.client_text(f"{type(err).__name__}: {err}"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return app


def _missing_package(err: ModuleNotFoundError) -> HubError:
    return HubError(f"attnhub serve needs fastapi, uvicorn and python-multipart ({err.name} is missing): "
                    "pip install 'attention-hub[serve]'")


async def _table_job(request, folder: Path, top_k: int) -> Job:
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise DataError('a table model takes a JSON body {"rows": [{column: value, ...}, ...]} '
                        "(Content-Type: application/json)")
    try:
        body = await request.json()
    except ValueError as err:
        raise DataError(f"the body is not valid JSON ({err})") from None
    path = folder / ROWS_NAME
    size = _write_rows(body.get("rows") if isinstance(body, dict) else None, path)
    return Job(folder, [path], {str(path): "the JSON rows"}, size, top_k)


async def _file_job(request, folder: Path, top_k: int, kind: str, form: InputForm) -> Job:
    from starlette.datastructures import UploadFile

    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise DataError(f"a model of input kind {kind!r} takes files: a multipart/form-data upload "
                        "(curl -F files=@input.png ...)")
    form = await request.form()
    uploads = [value for _, value in form.multi_items() if isinstance(value, UploadFile)]
    if not uploads:
        raise DataError("the request has no uploaded file; send one or more as multipart form fields")
    paths, shown = [], {}
    for number, upload in enumerate(uploads):
        name = Path(upload.filename or "").name
        if name in ("", ".", ".."):
            raise DataError(f"uploaded file {number + 1} has no file name; give each file its name (filename=...)")
        path = folder / name if form is InputForm.FOLDER else folder / str(number) / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(await upload.read())
        paths.append(path)
        shown[str(path)] = name
    if form is InputForm.FOLDER:
        return Job(folder, [folder], shown, 1, top_k)
    return Job(folder, paths, shown, len(paths), top_k)


def serve(name: str, host: str = "127.0.0.1", port: int = 8000, max_batch_size: int = 64,
          max_wait_ms: float = 10.0) -> None:
    """Load ``name`` and serve it on ``host:port`` until interrupted."""
    model = load_served(name)
    app = build_app(model, name, max_batch_size, max_wait_ms)
    try:
        import uvicorn
    except ModuleNotFoundError as err:
        raise _missing_package(err) from None

    uvicorn.run(app, host=host, port=port, log_level="info")
