"""``attnhub serve``: a pretrained tag or run folder behind HTTP, answering what ``attnhub predict`` prints.

- ``GET /``: a page to try the model in a browser (plain HTML and JS shipped in ``hub/deploy/static/``: no build
  step, no CDN, works offline): pick or drop files, see the top-k classes as bars, the OOD flag and score, the
  calibrated probabilities and, where the input kind draws one, the attention map of ``explain`` over the input.
- ``POST /predict``: for a model of input files (images, WAV files, sensor CSVs, ...) a multipart upload of the
  files (``curl -F files=@digit.png ...``); for a table model (an input kind of form ``InputForm.ROWS``) a JSON body
  ``{"rows": [{column: value, ...}, ...]}`` or a multipart upload of one CSV file. The answer is
  ``{"model": NAME, "sha256": ..., "kind": ..., "task": ..., "calibrated": bool, "predictions": [...]}``, one object per
  prediction with the columns of ``attnhub predict --out``'s CSV, typed: ``file`` (the uploaded file's name) or
  ``row`` (an integer), then ``class_1`` (text), ``prob_1`` (a number), ... (``?top_k=3``) or the card's output
  names (numbers); for a table ``prediction`` and ``proba_<class>``; ``ood_score`` (a number) and ``ood`` (a boolean)
  where the card has OOD statistics. ``?task=source`` or ``?task=both`` asks a run fine-tuned by memory tokens
  (``finetune --policy memory``) for its source model's classes, or for both tasks' columns, the source's prefixed
  ``source_`` (:mod:`hub.deploy.tasks`; ``task`` in the answer says which). One response model per input kind
  (``ImagePredictResponse``, ...), so ``/docs`` shows the schema. Bad input is answered with HTTP 422 and the
  :class:`~hub.errors.HubError`'s text, naming the uploaded file; a malformed request with HTTP 400.
- ``POST /explain``: one uploaded file; the figures of ``attnhub explain`` for it (PNG as a data URL, and beside each
  the attention map ``X.npy`` and its ``X.json`` when the kind writes them), or HTTP 422 saying why there are none.
- ``GET /models``: the model the server holds, its input kind and its card. ``GET /health``: liveness and counters.

Limits (:class:`Limits`), so that one client cannot exhaust the server: a request body larger than
``--max-upload-mb`` is refused with 413 before it is read whole (its ``Content-Length`` is checked first, and the
bytes are counted as they stream in, for a chunked body); a request waiting longer than ``--timeout-s`` is answered
504; when ``--max-queue`` requests already wait, the next one is answered 503 with ``Retry-After``. A token
(``--token`` or the ``ATTNHUB_TOKEN`` environment variable), required when ``--host`` is not a loopback address,
must come as ``Authorization: Bearer TOKEN`` on ``/predict``, ``/explain`` and ``/models`` (compared in constant
time, :func:`hmac.compare_digest`); else 401. ``/``, ``/health`` and the OpenAPI schema need none: they hold nothing
of the model's predictions.

Dynamic batching: requests wait in a bounded asyncio queue; one worker task takes those that arrive within
``max_wait_ms`` of the first, up to ``max_batch_size`` inputs, and runs the model on them in a thread, so the event
loop keeps accepting requests meanwhile. Where the input kind reads an upload from memory (``InputKind.read_bytes``:
images) and the card's predictor is the model itself, each request's files are decoded in a thread pool as they
arrive, and a batch is one collate and one model call over the decoded inputs: no temporary file. Other kinds write a
request's files to a temporary folder of its own, read by the same readers as ``predict``
(:func:`hub.kinds.predict_logits`, :mod:`hub.deploy.predict`); kinds of one prediction per file
(``InputForm.FILE_EACH``) still go through one model call per batch, the others (tables, graphs, speed files, whose
readers infer column types from one file) one call per request. A batch that fails is run again request by request,
so a bad file fails its own request only. Probabilities equal ``predict``'s up to float rounding: a CPU matrix
product rounds differently for different batch sizes (so does ``predict --batch-size``), which moves a probability's
6th decimal now and then.

FastAPI and uvicorn rather than LitServe: LitServe (0.2) answers every request of a batch with the error when one
request of it fails, counts a batch in requests rather than inputs, and runs the model in worker processes of its
own; here a bad file must fail its own request only and a batch is counted in files or rows.
"""
# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations (``Request``, imported in
# build_app) as objects.
import asyncio
import base64
import csv
import hmac
import ipaddress
import json
import logging
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hub.deploy.predict import (
    file_predictions,
    for_inference,
    predicted_values,
    prediction_cells,
    predictor_mix,
    row_predictors,
    table_predictions,
    value_cells,
)
from hub.deploy.tasks import SOURCE_PREFIX, TASKS, BothTasks, task_model
from hub.errors import DataError, HubError
from hub.kinds import InputForm, kind_of, kinds_supporting, predict_logits
from hub.predictor import blend_of
from hub.uncertainty.ood import HEADER as OOD_HEADER
from hub.uncertainty.ood import PredictionScorer

log = logging.getLogger(__name__)

ROWS_NAME = "rows.csv"  # a table request's JSON rows, written as CSV for the table reader
TOKEN_ENV = "ATTNHUB_TOKEN"  # where serve reads its token when --token is not given
STATIC = Path(__file__).parent / "static"  # the page at /


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server."""

    max_upload_mb: float = 16.0  # largest request body, in MiB; larger ones are answered 413 before being read whole
    timeout_s: float = 30.0  # longest wait for a request's answer (queue and model); longer: 504
    max_queue: int = 256  # most requests waiting for the model; one more is answered 503 with Retry-After
    token: str | None = None  # required as "Authorization: Bearer TOKEN" on /predict, /explain, /models (None: none)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 2 ** 20)


class Busy(HubError):
    """The request queue is full: answered 503 with Retry-After."""


class BadRequest(DataError):
    """A request not of the form the endpoint takes (no file, not JSON, ...): answered 400."""


class BodyTooLarge(Exception):
    """A request body over :attr:`Limits.max_upload_bytes`: answered 413."""


@dataclass
class Job:
    """One request: the names the client knows its inputs by (``names``), how many inputs it counts for in a batch,
    and either its decoded model inputs (``inputs``, one per name: read from memory) or its input paths on disk
    (``paths``, in its own ``folder``; ``shown``: path -> uploaded name); once queued, the future of its answer."""
    folder: Path | None
    paths: list[Path]
    shown: dict[str, str]
    size: int
    top_k: int
    inputs: list[Any] | None = None
    names: list[str] = field(default_factory=list)
    future: asyncio.Future | None = field(default=None, repr=False)

    def client_text(self, text: str) -> str:
        """``text`` with this job's temporary paths replaced by the names the client sent."""
        for path, name in self.shown.items():
            text = text.replace(path, name)
        if self.folder is None:
            return text
        return text.replace(f"{self.folder}/", "").replace(str(self.folder), "the request")


class BatchingPredictor:
    """The model, the request queue and the worker task that batches it (see the module's docstring).

    Args:
        model: a loaded hub model with its card (``pretrained_cfg``), in eval mode.
        max_batch_size: the most inputs (files or rows) per model call.
        max_wait_ms: how long the first request of a batch waits for others to join it.
        max_queue: the most requests waiting; one more raises :class:`Busy`.
    """

    def __init__(self, model, max_batch_size: int, max_wait_ms: float, max_queue: int = 256):
        if max_batch_size < 1 or max_wait_ms < 0 or max_queue < 1:
            raise HubError(f"--max-batch-size must be >= 1, --max-wait-ms >= 0 and --max-queue >= 1, got "
                           f"{max_batch_size}, {max_wait_ms} and {max_queue}")
        self.model, self.card = model, model.pretrained_cfg
        self.kind_reader = kind_of(self.card)
        self.kind = self.card.input_spec.get("kind")
        self.form = self.kind_reader.input_form  # how requests give the inputs, and whether they batch
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000
        self.queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=max_queue)
        self.requests = self.batches = 0
        # OOD columns of batched file requests, as predict writes them (None: the card has no OOD statistics)
        self.scorer = PredictionScorer.for_model(model)
        self.model_lock = threading.Lock()  # the OOD scorer's hook keeps the last input: one model call at a time
        # uploads decoded in memory: the kind reads bytes and the predictor is the model (a baseline reads paths)
        self.in_memory = (self.form is InputForm.FILE_EACH and self.kind in kinds_supporting("read_bytes")
                          and blend_of(self.card) is None)
        self.decoders = ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1), thread_name_prefix="decode")

    def decode(self, names: list[str], blobs: list[bytes]) -> list[Any]:
        """The model inputs of uploaded files, read from memory (in the decoder threads); raises naming a bad one."""
        return list(self.decoders.map(lambda nb: self.kind_reader.read_bytes(self.card, nb[1], nb[0]),
                                      zip(names, blobs)))

    async def predict(self, job: Job) -> list[dict[str, str]]:
        """``job``'s predictions, once the worker has run its batch; raises what its inputs raised, and
        :class:`Busy` when the queue is full."""
        job.future = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            raise Busy(f"{self.queue.maxsize} requests are waiting for the model; retry shortly") from None
        self.requests += 1
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
            jobs = [job for job in jobs if not job.future.done()]  # a client gone or timed out: not computed
            if not jobs:
                continue
            self.batches += 1
            for job, answer in zip(jobs, await asyncio.to_thread(self.answers, jobs)):
                if job.future.done():
                    continue
                if isinstance(answer, Exception):
                    job.future.set_exception(answer)
                else:
                    job.future.set_result(answer)

    def answers(self, jobs: list[Job]) -> list[list[dict[str, str]] | Exception]:
        """Per job, its predictions or the error its inputs raised (in the worker thread)."""
        with self.model_lock:
            if self.form is InputForm.FILE_EACH and len(jobs) > 1:
                try:
                    return self._batched(jobs)
                except Exception as err:  # some job's input: each job runs alone, to find which
                    log.debug("a batch of %d requests failed (%s); running them one by one", len(jobs), err)
            answers = []
            for job in jobs:
                try:
                    answers.append(self._batched([job])[0] if job.inputs is not None else self._alone(job))
                except Exception as err:  # the job's answer is its error; the server goes on
                    answers.append(err)
            return answers

    def _logits(self, jobs: list[Job]) -> tuple[list[str], torch.Tensor, list[list[str]], Any]:
        """Names, logits, OOD cells and the predictor's mix for the inputs of ``jobs``: decoded inputs in one collate
        and one model call per ``max_batch_size``, else the kind's reader over the paths."""
        from torch.utils.data import default_collate

        from hub.tasks import call_model

        ood_cells: list[list[str]] = []
        if all(job.inputs is not None for job in jobs):
            names = [name for job in jobs for name in job.names]
            inputs = [x for job in jobs for x in job.inputs]
            chunks = []
            with torch.inference_mode():
                for start in range(0, len(inputs), self.max_batch_size):
                    chunks.append(call_model(self.model, default_collate(inputs[start:start + self.max_batch_size])))
                    if self.scorer is not None:  # scores the inputs of the model call that just ran
                        ood_cells.extend(self.scorer.cells(chunks[-1]))
            return names, torch.cat(chunks), ood_cells, lambda values, flagged=None: values
        paths = [str(p) for job in jobs for p in job.paths]
        batches = []
        with torch.inference_mode():
            for batch_names, batch_logits in predict_logits(self.card, self.model, paths, self.max_batch_size):
                batches.append((batch_names, batch_logits))
                if self.scorer is not None:
                    ood_cells.extend(self.scorer.cells(batch_logits))
        names = [name for batch_names, _ in batches for name in batch_names]
        if names != paths:
            raise HubError(f"the {self.kind!r} reader did not give one prediction per file, named by its path")
        return names, torch.cat([batch_logits for _, batch_logits in batches]), ood_cells, predictor_mix(self.card,
                                                                                                           paths)

    def _batched(self, jobs: list[Job]) -> list[list[dict[str, str]]]:
        """One model call over the inputs of all ``jobs`` (kinds of one prediction per file)."""
        names, logits, ood_cells, mix = self._logits(jobs)
        both = isinstance(self.model, BothTasks)  # ?task=both: the source task's logits of the same inputs
        source = self.model.take_source() if both else None
        flagged = [cell[-1] == "True" for cell in ood_cells] if self.scorer is not None else None
        values = mix(predicted_values(logits, self.card), flagged)  # the card's predictor's
        answered = row_predictors(self.card, flagged, len(values))  # where the card keeps a guard
        answers, start = [], 0
        for job in jobs:
            end = start + job.size
            header, cells = value_cells(values[start:end], self.card, job.top_k)
            if source is not None:
                theirs, their_cells = prediction_cells(source[start:end], self.model.source_cfg, job.top_k)
                header = [*header, *(f"{SOURCE_PREFIX}{column}" for column in theirs)]
                cells = [[*c, *t] for c, t in zip(cells, their_cells)]
            if self.scorer is not None:
                header, cells = [*header, *OOD_HEADER], [[*c, *o] for c, o in zip(cells, ood_cells[start:end])]
            if answered is not None:
                header, cells = [*header, "predictor"], [[*c, a] for c, a in zip(cells, answered[start:end])]
            answers.append([self._named(job, ["file", *header], [name, *row])
                            for name, row in zip(names[start:end], cells)])
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


def typed_row(row: dict[str, str], classifier: bool) -> dict[str, Any]:
    """A prediction row of CSV cells (:meth:`BatchingPredictor._named`) as JSON values: ``row`` an integer, ``ood``
    a boolean, names and classes (``file``, ``class_<i>``, a classifier's ``prediction``) text, every other cell a
    number (probabilities, OOD scores, predicted values and their intervals)."""
    typed = {}
    for column, cell in row.items():
        if column == "row":
            typed[column] = int(cell)
        elif column == "ood":
            typed[column] = cell == "True"
        elif column == "file" or column.startswith(("class_", f"{SOURCE_PREFIX}class_")) or (
                column == "prediction" and classifier):
            typed[column] = cell
        else:
            typed[column] = float(cell)
    return typed


def response_models(card, kind: str, form: InputForm, ood: bool):
    """The pydantic models of ``/predict``'s answer for a model of ``card`` (one per input kind, named after it):
    the prediction row, with the columns ``predict --out`` writes as typed fields (classes and probabilities up to the
    number of classes; a regression's outputs, their intervals as further numbers), and the response around it."""
    from pydantic import ConfigDict, Field, create_model

    title = "".join(part.title() for part in kind.split("_"))
    number_or_none = (float | None, None)
    fields: dict[str, Any] = {}
    if form is InputForm.ROWS:
        fields["row"] = (int, Field(description="the row's number in the request, from 1"))
        if card.label_names:
            fields["prediction"] = (str, Field(description="the predicted class"))
            for i, label in enumerate(card.label_names):
                fields[f"proba_{i}"] = (float, Field(alias=f"proba_{label}", description=f"probability of {label!r}"))
        else:
            for name in card.output_names:
                fields[name] = number_or_none
    else:
        fields["file"] = (str, Field(description="the uploaded file's name (a sensor file's rows: file:sensor)"))
        for i in range(1, len(card.label_names) + 1):
            fields[f"class_{i}"] = (str | None, Field(None, description=f"the class ranked {i}"))
            fields[f"prob_{i}"] = (float | None, Field(None, description="its (calibrated) probability"))
        for name in card.output_names:
            fields[name] = number_or_none
    if ood:
        fields["ood_score"] = (float, Field(description="how unlike the training data the input looks"))
        fields["ood"] = (bool, Field(description="true when ood_score passes the card's threshold"))
    config = ConfigDict(extra="allow", populate_by_name=True)  # a regression's interval columns come as extras
    row = create_model(f"{title}Prediction", __config__=config, **fields)

    response = create_model(
        f"{title}PredictResponse",
        model=(str, Field(description="the model's name, as serve was started with")),
        sha256=(str, Field(description="sha256 of the served weights (the card's)")),
        kind=(str, Field(description="the model's input kind")),
        task=(str, Field("new", description="the task answered (?task=): new; for a run fine-tuned with --policy "
                                            "memory also source (the source model's classes) or both (the new "
                                            "task's columns, then the source's prefixed source_)")),
        calibrated=(bool, Field(description="probabilities are temperature-scaled on held-out data")),
        predictions=(list[row], ...))
    return row, response


def _write_rows(rows: Any, path: Path) -> int:
    """Write a table request's JSON ``rows`` (a list of ``{column: value}``) as the CSV ``predict --data`` would
    read; returns how many rows. Values are written as they are (``null`` leaves the cell empty: missing)."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise BadRequest('expected a JSON body {"rows": [{column: value, ...}, ...]} with at least one row')
    columns = list(dict.fromkeys(column for row in rows for column in row))
    for number, row in enumerate(rows, 1):
        nested = [c for c, v in row.items() if isinstance(v, (dict, list))]
        if nested:
            raise BadRequest(f"row {number}: columns {nested} hold a list or object; expected numbers, text or null")
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
    model = for_inference(load(ref))
    kind = kind_of(model.pretrained_cfg)
    if kind.name not in kinds_supporting("predict"):
        raise HubError(f"{name} takes inputs of kind {kind.name!r}, which has no reader for predictions "
                       f"(available: {kinds_supporting('predict')}); it cannot be served")
    return model


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: reachable from elsewhere
        return False


def server_token(host: str, token: str | None) -> str | None:
    """The token serve requires: ``token``, else ``$ATTNHUB_TOKEN``; a host other than loopback without one raises."""
    token = token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(host):
        raise HubError(f"--host {host} serves other machines: give a token with --token or the {TOKEN_ENV} "
                       "environment variable (clients send 'Authorization: Bearer TOKEN'), or serve on 127.0.0.1")
    return token


class UploadLimit:
    """ASGI middleware refusing a body over ``max_bytes``: by its ``Content-Length`` before reading it, else by
    counting the bytes as they stream in (a chunked body), raising :class:`BodyTooLarge` at the first byte over."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await _send_json(send, 413, {"detail": self._detail()})
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge(self._detail())
            return message

        await self.app(scope, counted, send)

    def _detail(self) -> str:
        return (f"the request body is larger than the server's limit of {self.max_bytes / 2 ** 20:g} MiB "
                "(attnhub serve --max-upload-mb)")


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": data})


def build_app(model, name: str, max_batch_size: int = 64, max_wait_ms: float = 10.0, limits: Limits = Limits()):
    """The FastAPI application serving ``model`` (loaded from ``name``) with dynamic batching, within ``limits``."""
    try:
        from fastapi import Depends, FastAPI, Request
        from fastapi.responses import HTMLResponse, JSONResponse
    except ModuleNotFoundError as err:
        raise _missing_package(err) from None
    from contextlib import asynccontextmanager

    # one batching predictor per task the model answers (hub.deploy.tasks): "new" alone, but for a memory-token run
    # also "source" and "both"
    tasks = TASKS if model.pretrained_cfg.memory_tokens else TASKS[:1]
    predictors = {task: BatchingPredictor(task_model(model, task, name), max_batch_size, max_wait_ms,
                                          limits.max_queue) for task in tasks}
    predictor = predictors["new"]
    card = predictor.card
    row_model, response_model = response_models(card, predictor.kind, predictor.form, predictor.scorer is not None)

    @asynccontextmanager
    async def lifespan(app):
        workers = [asyncio.create_task(p.work()) for p in predictors.values()]
        yield
        for worker, each in zip(workers, predictors.values()):
            worker.cancel()
            each.decoders.shutdown(wait=False)

    app = FastAPI(title=f"attnhub serve {name}", lifespan=lifespan)
    app.add_middleware(UploadLimit, max_bytes=limits.max_upload_bytes)
    app.state.predictor = predictor

    def refuse(status: int, text: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"detail": text}, status_code=status, headers=headers)

    @app.exception_handler(BodyTooLarge)
    async def too_large(request, err):
        return JSONResponse({"detail": str(err)}, status_code=413, headers={"Connection": "close"})

    expected = f"Bearer {limits.token}".encode() if limits.token else None

    class Unauthorized(Exception):
        pass

    @app.exception_handler(Unauthorized)
    async def unauthorized(request, err):
        return refuse(401, "this server requires a token: send 'Authorization: Bearer TOKEN' (the token serve was "
                           f"started with, --token or {TOKEN_ENV})", {"WWW-Authenticate": "Bearer"})

    def authorized(request: Request) -> None:
        if expected is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            raise Unauthorized()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": name, "kind": predictor.kind, "requests": predictor.requests,
                "batches": predictor.batches, "queued": predictor.queue.qsize()}

    @app.get("/models", dependencies=[Depends(authorized)])
    async def models() -> dict[str, Any]:
        return {"models": [{
            "name": name, "kind": predictor.kind, "sha256": card.sha256, "form": predictor.form.name.lower(),
            "calibrated": "temperature" in card.calibration, "ood": predictor.scorer is not None,
            "explain": predictor.kind in kinds_supporting("explanation"), "headline": card.headline_metric(),
            "card": card.to_dict()}]}

    @app.post("/predict", response_model=response_model, response_model_exclude_none=True,
              dependencies=[Depends(authorized)],
              responses={413: {"description": "body over --max-upload-mb"}, 503: {"description": "queue full"},
                         504: {"description": "over --timeout-s"}, 401: {"description": "token missing or wrong"}})
    async def predict(request: Request, top_k: int = 3, task: str = "new"):
        if top_k < 1:
            return refuse(400, f"top_k must be >= 1, got {top_k}")
        if task not in predictors:
            return refuse(400, f"task {task!r}: {name} answers {list(predictors)}" + (
                "" if task in TASKS else f"; expected one of {list(TASKS)}"))
        predictor = predictors[task]
        folder = None if predictor.in_memory else Path(tempfile.mkdtemp(prefix="attnhub-serve-"))
        try:
            try:
                job = await _job(request, folder, top_k, predictor)
            except BadRequest as err:
                return refuse(400, str(err))
            except HubError as err:  # an upload the kind cannot read (decoded in memory), named as sent
                return refuse(422, str(err))
            try:
                rows = await asyncio.wait_for(predictor.predict(job), limits.timeout_s)
            except Busy as err:
                return refuse(503, str(err), {"Retry-After": "1"})
            except asyncio.TimeoutError:
                return refuse(504, f"the prediction took longer than the server's limit of {limits.timeout_s:g} s "
                                   "(attnhub serve --timeout-s)")
            except HubError as err:
                return refuse(422, job.client_text(str(err)))
            except Exception as err:  # an input no reader foresaw; the server goes on
                log.exception("request failed")
                return refuse(500, job.client_text(f"{type(err).__name__}: {err}"))
            # built as the response model says (the schema at /docs), sent without validating it again per request
            return JSONResponse({"model": name, "sha256": card.sha256, "kind": predictor.kind, "task": task,
                                 "calibrated": "temperature" in predictor.card.calibration,
                                 "predictions": [typed_row(row, bool(predictor.card.label_names)) for row in rows]})
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    @app.post("/explain", dependencies=[Depends(authorized)])
    async def explain(request: Request):
        folder = Path(tempfile.mkdtemp(prefix="attnhub-explain-"))
        try:
            uploads = await _uploads(request, predictor.kind)
            file, blob = uploads[0]
            (folder / "in").mkdir()
            path = folder / "in" / file
            path.write_bytes(blob)
            figures = await asyncio.wait_for(asyncio.to_thread(_explained, predictor, path, folder / "out"),
                                             limits.timeout_s)
            return {"model": name, "file": file, "figures": figures}
        except (HubError, asyncio.TimeoutError) as err:
            return refuse(422, f"no attention map: {str(err).replace(str(folder) + '/in/', '')}")
        except Exception as err:  # explain is an extra: its failure is the answer, never the server's
            log.exception("explain failed")
            return refuse(422, f"no attention map: {type(err).__name__}: {err}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return app


def _explained(predictor: BatchingPredictor, path: Path, out_dir: Path) -> list[dict[str, Any]]:
    """The figures of ``explain`` for the file at ``path``: each PNG as a data URL, with the attention map ``X.npy``
    beside ``X.png`` as nested lists (None when absent) and ``X.json``'s fields (method, class, probability)."""
    import numpy as np

    from hub.kinds import explain_inputs

    out_dir.mkdir()
    with predictor.model_lock, torch.no_grad():
        pngs = [Path(p) for p in explain_inputs(predictor.card, predictor.model, [str(path)], out_dir)]
    figures = []
    for png in pngs:
        npy, meta = png.with_suffix(".npy"), png.with_suffix(".json")
        figures.append({
            "png": "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode(),
            "map": np.round(np.load(npy, allow_pickle=False).astype(float), 4).tolist() if npy.is_file() else None,
            "meta": json.loads(meta.read_text()) if meta.is_file() else None})
    return figures


def _missing_package(err: ModuleNotFoundError) -> HubError:
    return HubError(f"attnhub serve needs fastapi, uvicorn and python-multipart ({err.name} is missing): "
                    "pip install 'attention-hub[serve]'")


async def _uploads(request, kind: str) -> list[tuple[str, bytes]]:
    """The files of a multipart request: ``(name, bytes)`` each, the name without folders."""
    from starlette.datastructures import UploadFile

    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise BadRequest(f"a model of input kind {kind!r} takes files: a multipart/form-data upload in the request "
                        "(curl -F files=@input.png ...)")
    form = await request.form()
    uploads = [value for _, value in form.multi_items() if isinstance(value, UploadFile)]
    if not uploads:
        raise BadRequest("the request has no uploaded file; send one or more as multipart form fields")
    found = []
    for number, upload in enumerate(uploads):
        name = Path(upload.filename or "").name
        if name in ("", ".", ".."):
            raise BadRequest(f"uploaded file {number + 1} of the request has no file name; give each file its name "
                            "(filename=...)")
        found.append((name, await upload.read()))
    return found


async def _job(request, folder: Path | None, top_k: int, predictor: BatchingPredictor) -> Job:
    """The job of a ``/predict`` request: a table's rows (JSON, or one uploaded CSV file), files decoded in memory,
    or files written to ``folder``."""
    content = request.headers.get("content-type", "")
    if predictor.form is InputForm.ROWS and not content.startswith("multipart/form-data"):
        return await _table_job(request, folder, top_k)
    uploads = await _uploads(request, predictor.kind)
    if predictor.in_memory:
        names = [n for n, _ in uploads]
        inputs = await asyncio.get_running_loop().run_in_executor(
            None, predictor.decode, names, [b for _, b in uploads])
        return Job(None, [], {}, len(inputs), top_k, inputs=inputs, names=names)
    if predictor.form is InputForm.ROWS:
        if len(uploads) != 1:
            raise BadRequest(f"a table model takes one CSV file per request, got {len(uploads)}")
        path = folder / ROWS_NAME
        path.write_bytes(uploads[0][1])
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as stream:
            size = max(sum(1 for _ in csv.reader(stream)) - 1, 1)
        return Job(folder, [path], {str(path): uploads[0][0]}, size, top_k)
    paths, shown = [], {}
    for number, (name, blob) in enumerate(uploads):
        path = folder / name if predictor.form is InputForm.FOLDER else folder / str(number) / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(blob)
        paths.append(path)
        shown[str(path)] = name
    if predictor.form is InputForm.FOLDER:
        return Job(folder, [folder], shown, 1, top_k)
    return Job(folder, paths, shown, len(paths), top_k)


async def _table_job(request, folder: Path, top_k: int) -> Job:
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise BadRequest('a table model takes a JSON body {"rows": [{column: value, ...}, ...]} '
                        "(Content-Type: application/json) or one CSV file uploaded as multipart/form-data")
    try:
        body = await request.json()
    except ValueError as err:
        raise BadRequest(f"the body is not valid JSON ({err})") from None
    path = folder / ROWS_NAME
    size = _write_rows(body.get("rows") if isinstance(body, dict) else None, path)
    return Job(folder, [path], {str(path): "the JSON rows"}, size, top_k)


def serve(name: str, host: str = "127.0.0.1", port: int = 8000, max_batch_size: int = 64,
          max_wait_ms: float = 10.0, limits: Limits = Limits(), verbose: bool = False) -> None:
    """Load ``name`` and serve it on ``host:port`` until interrupted (``limits.token`` may be None only on a
    loopback ``host``: :func:`server_token`)."""
    limits = Limits(limits.max_upload_mb, limits.timeout_s, limits.max_queue, server_token(host, limits.token))
    try:
        import uvicorn
    except ModuleNotFoundError as err:
        raise _missing_package(err) from None
    model = load_served(name)
    app = build_app(model, name, max_batch_size, max_wait_ms, limits)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {name} at http://{shown}:{port}/ (the page; POST /predict, /docs"
          f"{'; token required' if limits.token else ''}); Ctrl+C stops", flush=True)
    # uvicorn's start-up lines and access log only with --verbose: the line above says where to go
    uvicorn.run(app, host=host, port=port, log_level="info" if verbose else "warning", access_log=verbose)
