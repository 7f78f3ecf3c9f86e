"""Token counting with the model's own tokenizer (a Hugging Face ``tokenizers`` tokenizer.json), as
genai-perf counts: special tokens are not added, and a response's tokens are those of its whole text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trt import DISTRIBUTION
from trt.perf.errors import OptionError

MAX_TOKENIZER_BYTES = 256 * 2**20  # a tokenizer.json is a few MB; refuse to read an arbitrary large file


class TokenCounter:
    """``count(text)`` and ``decode(ids)`` over one tokenizer.json."""

    def __init__(self, tokenizer: Any, source: Path) -> None:
        self._tokenizer = tokenizer
        self.source = source

    @classmethod
    def load(cls, path: Path) -> TokenCounter:
        """``path`` is a tokenizer.json or a folder holding one (a model folder, a version folder)."""
        try:
            import tokenizers
        except ImportError:
            raise OptionError(
                f"--tokenizer needs the tokenizers package: pip install '{DISTRIBUTION}[genai]'"
            ) from None
        candidates = (
            [path] if path.is_file() else [path / "tokenizer.json", *sorted(path.glob("*/tokenizer.json"))]
        )
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise OptionError(f"--tokenizer {path}: no tokenizer.json there (give the file or its folder)")
        if found.stat().st_size > MAX_TOKENIZER_BYTES:
            raise OptionError(f"--tokenizer {found}: larger than {MAX_TOKENIZER_BYTES >> 20} MiB")
        try:
            return cls(tokenizers.Tokenizer.from_file(str(found)), found)
        except Exception as error:  # the Rust side raises its own exception types
            raise OptionError(f"--tokenizer {found}: not a tokenizers tokenizer.json ({error})") from None

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    def count_many(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) if t else 0 for e, t in zip(encodings, texts, strict=True)]

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))

    @property
    def vocabulary_size(self) -> int:
        return int(self._tokenizer.get_vocab_size())
