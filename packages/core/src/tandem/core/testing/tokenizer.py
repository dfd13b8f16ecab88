"""A small, deterministic byte-level BPE tokenizer trained locally (no hub downloads).

``make_tokenizer(path)`` trains a tokenizer with the ``tokenizers`` library on a
generated corpus and saves it so that ``transformers.AutoTokenizer.from_pretrained(path)``
loads it as a fast tokenizer. Special tokens and their ids follow the Llama convention:

    0 ``<unk>``   1 ``<s>`` (bos, prepended to every encoding)   2 ``</s>`` (eos)   3 ``<pad>``

Every byte is in the initial alphabet, so any text encodes without ``<unk>``; characters
outside the corpus (most emoji) stay split into single-byte tokens, which is what the
streaming detokenizer tests need. The corpus mixes English with accented Latin, Greek,
Cyrillic, CJK and emoji, so some multi-byte characters do get merged tokens.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
FORMAT_VERSION = 2  # 2: a chat template
MODEL_MAX_LENGTH = 1 << 20
STAMP = "tandem_tokenizer.json"
_MIN_VOCAB = len(SPECIAL_TOKENS) + 256

_SUBJECTS = (
    "the cat",
    "a small robot",
    "my neighbour",
    "the old library",
    "every student",
    "the river",
    "a quiet engineer",
    "the committee",
    "our team",
    "the kernel",
    "a tired traveller",
    "the weather",
    "the scheduler",
    "a young fox",
    "the orchestra",
)
_VERBS = (
    "reads",
    "builds",
    "watches",
    "remembers",
    "carries",
    "measures",
    "paints",
    "follows",
    "answers",
    "explains",
    "repairs",
    "visits",
    "counts",
    "writes",
    "opens",
)
_OBJECTS = (
    "a long letter",
    "the blue door",
    "seven apples",
    "the morning train",
    "a paged cache",
    "the last question",
    "three tokens",
    "an empty room",
    "the winter garden",
    "a broken clock",
    "the map of the city",
    "forty lines of code",
)
_ENDINGS = (
    "before noon.",
    "after the storm.",
    "without a word.",
    "in the evening.",
    "on Tuesday.",
    "with great care.",
    "again and again.",
    "near the station.",
    "for the first time.",
    "as usual.",
    "quite slowly.",
    "by the window.",
)
_QUESTIONS = (
    "Why does {s} {v} {o}?",
    "Did {s} really {v} {o}?",
    "How often does {s} {v} {o}?",
    "Who said that {s} {v} {o}?",
)
_FOREIGN = (
    "Le café est très chaud, n'est-ce pas ?",
    "Das Mädchen läuft über die Straße.",
    "El niño comió una manzana en el jardín.",
    "Ο ήλιος λάμπει πάνω από τη θάλασσα.",
    "Москва — столица России, а Киев — столица Украины.",
    "日本語の文章を少し書きます。",
    "今天的天气很好，我们去公园散步吧。",
    "한국어 문장도 조금 있습니다.",
    "Naïve façade, coöperate, São Paulo, Zürich, Kraków.",
    "Ça va très bien, merci beaucoup!",
    "Smiles 🙂 and rockets 🚀 and hearts ❤️ appear now and then.",
    "¿Dónde está la biblioteca?",
)
_CODE = (
    "def add(a, b):\n    return a + b",
    "for i in range(10):\n    print(i * i)",
    "if x > 0 and y < 3: z = x - y",
    '{"name": "tandem", "version": 1}',
    "SELECT id, name FROM users WHERE age >= 21;",
    "x = [1, 2, 3]; y = {k: v for k, v in d}",
)


def corpus(num_lines: int = 400, seed: int = 20240601) -> list[str]:
    """The generated training corpus: a few hundred varied lines, the same on every call."""
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(num_lines):
        kind = i % 8
        s, v, o, e = (rng.choice(xs) for xs in (_SUBJECTS, _VERBS, _OBJECTS, _ENDINGS))
        if kind in (0, 1, 2):
            line = f"{s.capitalize()} {v} {o} {e}"
        elif kind == 3:
            line = rng.choice(_QUESTIONS).format(s=s, v=v.rstrip("s"), o=o)
        elif kind == 4:
            line = rng.choice(_FOREIGN)
        elif kind == 5:
            line = rng.choice(_CODE)
        elif kind == 6:
            a, b = rng.randrange(1000), rng.randrange(1000)
            line = f"{a} plus {b} is {a + b}, and {a} times {b} is {a * b}."
        else:
            line = f"Item {i}: {o}, {rng.choice(_OBJECTS)} and {rng.choice(_FOREIGN)}"
        lines.append(line)
    return lines


def _settings(vocab_size: int) -> dict[str, object]:
    return {"format": FORMAT_VERSION, "vocab_size": vocab_size, "special": list(SPECIAL_TOKENS)}


def _train(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B",
        special_tokens=[("<s>", BOS_ID)],
    )
    for i, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != i:
            raise RuntimeError(f"special token {name!r} got id {tok.token_to_id(name)}, not {i}")
    return tok


# role-tagged turns, each ended by EOS, then the assistant's tag: enough for LLM.chat and
# the chat endpoint to be tested on the tiny model (its text is not a conversation)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
    }


def _write(path: Path, text: str) -> None:
    """Write atomically, so concurrent makers never see a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _dump(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def is_made(path: str | os.PathLike[str], vocab_size: int = 512) -> bool:
    """Whether ``path`` already holds a tokenizer made with these settings."""
    root = Path(path)
    stamp = root / STAMP
    needed = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    if not stamp.is_file() or not all((root / name).is_file() for name in needed):
        return False
    try:
        return json.loads(stamp.read_text(encoding="utf-8")) == _settings(vocab_size)
    except (OSError, ValueError):
        return False


def make_tokenizer(path: str | os.PathLike[str], vocab_size: int = 512) -> Path:
    """Train (or reuse) the test tokenizer in directory ``path``; returns the directory.

    Deterministic: two runs write byte-identical files. Cached: when ``path`` already
    holds a tokenizer made with the same settings, nothing is written.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    if not _MIN_VOCAB <= vocab_size <= 65536:
        raise ValueError(
            f"vocab_size must be between {_MIN_VOCAB} (special tokens + 256 bytes) "
            f"and 65536, got {vocab_size}"
        )
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise ValueError(f"path must be a directory, got a file: {root}")
    if is_made(root, vocab_size):
        return root
    root.mkdir(parents=True, exist_ok=True)
    tok = _train(vocab_size)
    _write(root / "tokenizer.json", tok.to_str(pretty=True) + "\n")
    _write(root / "tokenizer_config.json", _dump(_config()))
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    _write(root / "special_tokens_map.json", _dump(special))
    _write(root / STAMP, _dump(_settings(vocab_size)))
    return root
