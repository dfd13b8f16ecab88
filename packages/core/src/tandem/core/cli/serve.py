"""``tandem serve``: the OpenAI-compatible server as a program.

The port is bound before the model loads, so a port already taken is an error at once,
not after a minute of loading. An engine that cannot start (a model that does not load,
a KV cache that does not fit) ends it with exit code 2 and why on stderr: the type and
message of the exception raised, in this process or in an engine's child process.
SIGTERM (how service managers and containers stop a server) and Ctrl-C stop it the same
way: no new connections, the requests in flight get ``--shutdown-timeout`` seconds to
finish, then are aborted; one line says so; exit 0. An engine that dies ends the server
with exit code 1, so whatever supervises it restarts it.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from typing import Any

from tandem.core.cli.engine_kwargs import engine_args
from tandem.core.cli.engine_label import chosen_engine

ENGINE_FAILED = 1  # the exit code when the engine died under the server


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, or OSError saying the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server that ends on SIGTERM/SIGINT without dying by the signal, and
        says once what it does with the requests in flight."""

        def __init__(self, config: Any, grace: float, service: Any) -> None:
            super().__init__(config)
            self.grace = grace
            self.service = service

        def install_signal_handlers(self) -> None:  # uvicorn < 0.29
            pass

        def capture_signals(self) -> Any:
            import contextlib

            @contextlib.contextmanager
            def captured() -> Any:
                if threading.current_thread() is not threading.main_thread():
                    yield
                    return
                sigs = (signal.SIGINT, signal.SIGTERM)
                before = {sig: signal.signal(sig, self.handle_exit) for sig in sigs}
                try:
                    yield
                finally:
                    for sig, handler in before.items():
                        signal.signal(sig, handler)

            return captured()

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit:  # a second signal: stop waiting for the requests
                self.force_exit = True
                return
            self.stop(signal.Signals(sig).name)

        def stop(self, reason: str) -> None:
            self.should_exit = True
            self.service.drain()
            print(
                f"tandem serve: stopping ({reason}): no new requests; "
                f"{self.service.in_flight()} in flight get up to {self.grace:g} s to finish, "
                "then are aborted",
                file=sys.stderr,
                flush=True,
            )
            timer = threading.Timer(self.grace, self.service.abort_all, ["the server is stopping"])
            timer.daemon = True
            timer.start()

    return Server


def _watch_engine(llm: Any, server: Any, failed: list[str]) -> threading.Thread:
    """Stops the server when the engine thread ends on a failure (not on shutdown)."""

    def watch() -> None:
        llm.stopped.wait()
        if llm.failure is not None and not server.should_exit:
            failed.append(str(llm.failure).splitlines()[0] if str(llm.failure) else "")
            server.stop("the engine failed")

    thread = threading.Thread(target=watch, name="tandem-engine-watch", daemon=True)
    thread.start()
    return thread


def server_config(args: argparse.Namespace, names: str | tuple[str, ...]) -> Any:
    """The ``ServerConfig`` the flags ask for (``names``: the default served names, the
    first announced)."""
    from tandem.core import envs
    from tandem.core.server.config import ServerConfig

    keys = args.api_key or ([envs.TANDEM_API_KEY] if envs.TANDEM_API_KEY else [])
    default = (names,) if isinstance(names, str) else names
    return ServerConfig(
        model_names=tuple(args.served_model_name or default),
        api_keys=tuple(keys),
        strict_fields=args.strict_fields,
        max_body_bytes=args.max_body_bytes,
        max_prompts=args.max_prompts,
        max_sequences=args.max_sequences,
        max_waiting=args.max_waiting,
        engine_window=args.engine_window,
        body_timeout=args.timeout_body,
        quiet=args.quiet,
        tool_call_parser=args.tool_call_parser,
        allowed_origins=tuple(args.allowed_origins),
        allowed_methods=tuple(args.allowed_methods),
        allowed_headers=tuple(args.allowed_headers),
        allow_credentials=args.allow_credentials,
    )


def run_serve(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        print(
            "tandem serve: error: needs FastAPI and uvicorn: pip install 'tandem-core[serve]'",
            file=sys.stderr,
        )
        return 2
    from tandem.core.catalog.named_models import resolve_model, served_names
    from tandem.core.entrypoints.async_llm import AsyncLLM
    from tandem.core.progress import say
    from tandem.core.server.app import build_app

    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        print(
            f"tandem serve: error: cannot listen on {args.host}:{args.port} ({exc.strerror}); "
            "choose another with --port",
            file=sys.stderr,
        )
        return 2
    with sock:
        try:
            model = resolve_model(args.model)
            served = server_config(args, served_names(args.model, model))
            engine, label = chosen_engine(args.engine)
            say(f"loading {model} ({label})")
            llm = AsyncLLM(model, engine=engine, **engine_args(args))
        except (TypeError, ValueError, RuntimeError) as exc:
            print(f"tandem serve: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # the model's loading failed in this process (engine v0)
            from tandem.core.child_failure import ChildError

            why = ChildError.of(exc).describe()
            print(f"tandem serve: error: the engine failed to start: {why}", file=sys.stderr)
            return 2
        name = served.name
        failed: list[str] = []
        with llm:
            app = build_app(llm, served)
            config = uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                timeout_keep_alive=args.timeout_keep_alive,
                # the backstop: requests were aborted at the grace's end already
                timeout_graceful_shutdown=args.shutdown_timeout + 5,
            )
            server = _server_class()(config, args.shutdown_timeout, app.state.service)
            _watch_engine(llm, server, failed)
            bound = sock.getsockname()[1]
            say(f"serving {name!r} on http://{args.host}:{bound} with engine {llm.engine_name}")
            if served.api_keys:
                say("clients must send 'Authorization: Bearer KEY' (/health is open)")
            say("Ctrl-C or SIGTERM stops it")
            try:
                server.run(sockets=[sock])
            finally:
                app.state.service.close()
    if failed:
        print(f"tandem serve: exiting: the engine failed: {failed[0]}", file=sys.stderr)
        return ENGINE_FAILED
    say("stopped")
    return 0
