"""The calculator page: a FastAPI app serving one static page (HTML, vanilla JS and CSS, nothing
fetched from elsewhere) and the JSON it asks for.

- ``GET /``: the page; ``GET /static/...``: its script and style sheet.
- ``GET /api/catalog``: the pickers' choices (:func:`llmco2.ui.catalog.catalog`).
- ``POST /api/compare``: the form (``multipart/form-data`` or urlencoded; fields of
  :data:`llmco2.ui.form.FIELDS`, and optionally a ``config`` file: a Hugging Face ``config.json``
  used as the model) -> :func:`llmco2.api.compare.compare`'s table as JSON.
- ``POST /api/predict``: one request (fields of :data:`llmco2.ui.form.PREDICT_FIELDS`) ->
  :meth:`llmco2.api.single.Prediction.to_dict` (what ``llmco2 predict --json`` prints).

Bad input answers HTTP 400 with ``{"error": message, "field": name, "parameter": api_name}``;
``describe`` words the message and names the field (the command line passes its own wording, so
the page says what ``llmco2 compare`` would print).

Example:
    >>> from fastapi.testclient import TestClient
    >>> client = TestClient(create_app())
    >>> client.post("/api/compare", data={"model": "llama3.1-8b", "rate": "-1"}).json()["error"]
    'rate: must be a positive number of requests per second, got -1.0'
"""

from __future__ import annotations

import importlib
import math
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from llmco2.errors import InvalidInputError
from llmco2.ui.catalog import catalog
from llmco2.ui.form import read_compare_form, read_predict_form

#: Words an input error for the page: ``(message, field name shown)``.
Describe = Callable[[InvalidInputError], "tuple[str, str | None]"]
#: Largest config.json accepted (bytes).
MAX_CONFIG_BYTES = 1 << 20


def plain_error(exc: InvalidInputError) -> tuple[str, str | None]:
    """The error's own one line and its API parameter."""
    return str(exc), exc.field


def json_ready(value: Any) -> Any:
    """``value`` with NumPy scalars as Python numbers and NaN or infinities as ``None``."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def table_json(table: Any) -> dict[str, Any]:
    """The comparison as the page reads it: rows (every column, unrounded), verdict, notes."""
    ttft = next(c for c in table.columns if c.startswith("ttft_p"))
    tpot = next(c for c in table.columns if c.startswith("tpot_p"))
    return json_ready({"model": table.attrs.get("model"), "verdict": table.attrs.get("verdict"),
                       "left_out": table.attrs.get("left_out", []), "assumptions": table.attrs.get("assumptions", {}),
                       "columns": {"ttft": ttft, "tpot": tpot}, "options": table.to_dict(orient="records")})


async def form_fields(request: Request) -> tuple[dict[str, str], UploadFile | None]:
    """The request's text fields and its uploaded ``config`` file (if any)."""
    form = await request.form(max_part_size=MAX_CONFIG_BYTES)
    upload, fields = None, {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key != "config":
                raise InvalidInputError("only a config.json may be uploaded (field 'config')", field=key)
            upload = value if value.filename else None
        else:
            fields[key] = value
    return fields, upload


def with_config(upload: UploadFile | None, run: Callable[[str | None], Any]) -> Any:
    """``run(path)`` with the uploaded config.json saved to a temporary file (``None``: no upload);
    an error naming the temporary path names the uploaded file instead."""
    if upload is None:
        return run(None)
    data = upload.file.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise InvalidInputError(f"{upload.filename} is larger than {MAX_CONFIG_BYTES:,} bytes; is it a config.json?",
                                field="model")
    with tempfile.TemporaryDirectory(prefix="llmco2-ui-") as folder:
        path = Path(folder) / "config.json"
        path.write_bytes(data)
        try:
            return run(str(path))
        except InvalidInputError as exc:
            text = str(exc.args[0] if exc.args else "").replace(str(path), upload.filename or "config.json")
            raise InvalidInputError(text, field=exc.field) from None


def create_app(describe: Describe = plain_error) -> FastAPI:
    """The app; ``describe`` words input errors (default: the error's own line and parameter)."""
    from llmco2.api.compare import compare
    from llmco2.api.single import predict
    from llmco2.version import __version__

    importlib.import_module("python_multipart")  # the form parser: missing, the ui extra is named now, not at a request
    app = FastAPI(title="llmco2 calculator", version=__version__, docs_url=None, redoc_url=None)
    static = resources.files("llmco2.ui") / "static"
    page = (static / "index.html").read_text(encoding="utf-8")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    catalog()  # built now, so that the page's first load does not wait for it
    lock = threading.Lock()  # one simulation at a time: the page is a local calculator for one user

    @app.exception_handler(InvalidInputError)
    async def refuse(request: Request, exc: InvalidInputError) -> JSONResponse:
        message, field = describe(exc)
        return JSONResponse({"error": message, "field": field, "parameter": exc.field}, status_code=400)

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return page

    @app.get("/api/catalog")
    async def choices() -> dict[str, Any]:
        return catalog()

    @app.post("/api/compare")
    async def compare_endpoint(request: Request) -> dict[str, Any]:
        fields, upload = await form_fields(request)
        kwargs = read_compare_form(fields)
        model = kwargs.pop("model")
        if model is None and upload is None:
            raise InvalidInputError("give a model id or upload a config.json", field="model")

        def run(path: str | None) -> Any:
            with lock:
                return compare(path or model, **kwargs)

        started = time.perf_counter()
        table = await run_in_threadpool(with_config, upload, run)
        return {**table_json(table), "seconds": round(time.perf_counter() - started, 3)}

    @app.post("/api/predict")
    async def predict_endpoint(request: Request) -> dict[str, Any]:
        fields, upload = await form_fields(request)
        model, kwargs = read_predict_form(fields)
        if model is None and upload is None:
            raise InvalidInputError("give a model id or upload a config.json", field="model")
        result = await run_in_threadpool(with_config, upload, lambda path: predict(path or model, **kwargs))
        return json_ready(result.to_dict())

    return app
