"""Running the app: in a thread of this process (tests, benchmarks) or as ``tandem serve``."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tandem.core.async_llm import AsyncLLM


@contextlib.contextmanager
def running_server(
    llm: AsyncLLM, model_name: str, host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """Serve ``llm`` from a thread meanwhile (port 0: any free one); yields the base URL."""
    import uvicorn

    from tandem.core.server.app import build_app

    app = build_app(llm, model_name)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="tandem-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the HTTP server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def serve_from_cli(args: Any) -> int:
    """``tandem serve``: build the engine, serve until Ctrl-C, then shut everything down."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        print(
            "tandem serve: error: needs FastAPI and uvicorn: pip install 'tandem-core[serve]'",
            file=sys.stderr,
        )
        return 2
    from tandem.core.cli import _default_len, engine_args, resolve_model
    from tandem.core.progress import say
    from tandem.core.server.app import build_app

    try:
        model = resolve_model(args.model)
        kwargs = engine_args(args)
        if args.max_model_len is None:
            kwargs["max_model_len"] = _default_len(model)
        say(f"loading {model} ({args.engine or 'default'} engine)")
        llm = AsyncLLM(model, engine=args.engine, **kwargs)
    except (TypeError, ValueError, RuntimeError) as exc:
        print(f"tandem serve: error: {exc}", file=sys.stderr)
        return 2
    name = args.served_model_name or Path(model).name
    with llm:
        url = f"http://{args.host}:{args.port}"
        say(f"serving {name!r} on {url} with engine {llm.engine_name}; Ctrl-C stops")
        uvicorn.run(build_app(llm, name), host=args.host, port=args.port, log_level="warning")
    return 0
