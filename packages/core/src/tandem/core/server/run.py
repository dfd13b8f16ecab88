"""Running the app in a thread of this process (tests, benchmarks); ``tandem serve`` is
:mod:`tandem.core.cli.serve`."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from tandem.core.entrypoints.async_llm import AsyncLLM
from tandem.core.server.config import ServerConfig


class ServerURL(str):
    """The base URL of a running server, with its ``app`` (tests reach its service)."""

    app: Any


@contextlib.contextmanager
def running_server(
    llm: AsyncLLM,
    model_name: str | tuple[str, ...] | ServerConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout_keep_alive: int = 5,
    **options: Any,
) -> Iterator[ServerURL]:
    """Serve ``llm`` from a thread meanwhile (port 0: any free one); yields the base URL.

    ``model_name``: the served name(s) (None: the names ``llm`` was opened by);
    ``options`` are :class:`ServerConfig` fields (``api_keys``, ``max_prompts``...).
    """
    import uvicorn

    from tandem.core.server.app import build_app

    app = build_app(llm, model_name, **options)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        timeout_keep_alive=timeout_keep_alive,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="tandem-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            app.state.service.close()
            raise RuntimeError(f"the HTTP server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    url = ServerURL(f"http://{host}:{bound}")
    url.app = app
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        app.state.service.close()
