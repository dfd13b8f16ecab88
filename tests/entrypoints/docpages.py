"""The code blocks of the README and of ``docs/*.md``, and how each one is run.

A block may be preceded by a directive, an HTML comment that renders as nothing:
``<!-- doc-test: HOW -->`` or ``<!-- doc-test: HOW (why) -->``. Without one, a block is run
in the fast suite. HOW is one of:

- ``run``: run (the default); ``slow``: run only with ``-m slow``;
- ``parse``: not run (it installs, serves forever or takes minutes): its ``tandem`` commands
  are parsed by the real parser and the benchmarks it names must exist with their flags;
- ``server``: a shell block holding one ``tandem serve`` command, started (on a free port)
  for the page's ``client`` blocks, which are run against it; ``slow-server``: the same,
  only with ``-m slow``;
- ``pytest``: a Python block that is a test file, run by pytest with the project's config.

(Imported as ``docpages``: a module named ``conftest`` is ambiguous across test folders.)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
HOWS = ("run", "slow", "parse", "server", "slow-server", "client", "pytest")
SERVERS = ("server", "slow-server")
LANGS = {"python": "python", "bash": "bash", "sh": "bash", "console": "bash", "shell": "bash"}
# the address every served example is written against; the tests put their own port in
SERVED_AT = "127.0.0.1:8000"

_BLOCK = re.compile(
    r"(?:^<!--\s*doc-test:\s*(?P<how>[\w-]+)[^>]*-->\n)?^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block of a page."""

    page: str  # relative to the repository root
    line: int  # of the opening fence
    lang: str  # "python", "bash", or the fence's own word for anything else
    code: str
    how: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("lang")) + 1
        lang = LANGS.get(m["lang"], m["lang"])
        found.append(Block(page, line, lang, m["code"], m["how"] or "run"))
    return found


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block as words: continuation lines joined, each ``&&``
    part separately, comments dropped."""
    out = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            if words[:cut]:
                out.append(words[:cut])
            words = words[cut + 1 :]
    return out


def python_program(examples: list[Block]) -> str:
    """One program that runs each Python example in a namespace of its own, as a script
    (``__name__ == "__main__"``), its tracebacks naming the page and line."""
    parts = ["import sys"]
    for b in examples:
        parts.append(f"print('--- {b.where}', file=sys.stderr, flush=True)")
        parts.append(
            f"exec(compile({b.code!r}, {b.where!r}, 'exec'), "
            "{'__name__': '__main__', '__builtins__': __builtins__})"
        )
    return "\n".join(parts)


def served(page: str) -> tuple[Block | None, list[Block]]:
    """The page's ``server`` block (if any) and its ``client`` blocks."""
    page_blocks = blocks(page)
    servers = [b for b in page_blocks if b.how in SERVERS]
    assert len(servers) <= 1, f"{page}: more than one server block"
    return (servers[0] if servers else None), [b for b in page_blocks if b.how == "client"]


def with_port(code: str, port: int) -> str:
    return code.replace(SERVED_AT, f"127.0.0.1:{port}")


_LINK = re.compile(r"\]\((?!https?://|mailto:)(?P<target>[^)#\s]*)(?:#(?P<anchor>[^)\s]+))?\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def broken_links(page: str) -> list[str]:
    """Relative links of ``page`` whose file, or heading anchor, does not exist."""
    text = (ROOT / page).read_text(encoding="utf-8")
    problems = []
    for m in _LINK.finditer(text):
        target = (ROOT / page).parent / m["target"] if m["target"] else ROOT / page
        if not target.exists():
            problems.append(f"{page}: link to {m['target']!r}: no such file")
            continue
        if m["anchor"] and target.suffix == ".md":
            heads = re.findall(r"^#+\s+(.*)$", target.read_text(encoding="utf-8"), re.M)
            if m["anchor"] not in {slug(h) for h in heads}:
                problems.append(f"{page}: link to {m[0][2:-1]!r}: no such heading")
    return problems
