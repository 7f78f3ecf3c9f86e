"""Synthetic prompts of controlled token lengths (genai-perf's ``--synthetic-input-tokens-mean`` and
``-stddev``): each length drawn from a normal distribution, each prompt a slice of a tokenized corpus,
decoded to text and trimmed until the tokenizer counts exactly that many tokens again. Prompts from a
file (``--input-file``) are counted as they are.

The corpus is English-like text made here from a fixed word list with a seeded generator (no data is
read from anywhere), so a seed gives the same prompts on every machine."""

from __future__ import annotations

import random
from dataclasses import dataclass

from trt.perf.genai.tokenizer import TokenCounter

_WORD_LINES = (
    "the of and to in is that it was for on are as with they be at one have this from by hot word",
    "but what some we can out other were all there when up use your how said an each she which do",
    "their time if will way about many then them write would like so these her long make thing see",
    "him two has look more day could go come did number sound no most people my over know water",
    "than call first who may down side been now find any new work part take get place made live",
    "where after back little only round man year came show every good me give our under name very",
    "through just form sentence great think say help low line differ turn cause much mean before",
    "move right boy old too same tell does set three want air well also play small end put home",
    "read hand port large spell add even land here must big high such follow act why ask men change",
    "went light kind off need house picture try us again animal point mother world near build self",
    "earth father head stand own page should country found answer school grow study still learn",
    "plant cover food sun four between state keep eye never last let thought city tree cross farm",
    "hard start might story saw far sea draw left late run while press close night real life few",
    "north open seem together next white children begin got walk example ease paper group always",
    "music those both mark often letter until mile river car feet care second book carry took",
    "science eat room friend began idea fish mountain stop once base hear horse cut sure watch",
    "color face wood main enough plain girl usual young ready above ever red list though feel talk",
    "bird soon body dog family direct pose leave song measure door product black short numeral",
    "class wind question happen complete ship area half rock order fire south problem",
)
WORDS = tuple(" ".join(_WORD_LINES).split())
CORPUS_WORDS = 30_000
MAX_PROMPT_TOKENS = 131_072


def corpus_text(seed: int = 0) -> str:
    """Sentences of 6-18 words, capitalized and stopped, from ``WORDS``."""
    rng = random.Random(seed)
    sentences, total = [], 0
    while total < CORPUS_WORDS:
        length = rng.randint(6, 18)
        words = [rng.choice(WORDS) for _ in range(length)]
        sentences.append(" ".join(words).capitalize() + rng.choice((".", ".", ".", "?", "!")))
        total += length
    return " ".join(sentences)


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int  # as the tokenizer counts the text (every text of a batch, together)
    max_tokens: int  # output tokens to ask for; 0 leaves it to the server
    batch: tuple[str, ...] = ()  # embeddings sent several at once (--batch-size-text): all of them

    @property
    def texts(self) -> int:
        """How many texts the request carries, so how many answers it must get."""
        return len(self.batch) or 1


def batched(prompts: list[Prompt], size: int) -> list[Prompt]:
    """``prompts`` in consecutive groups of ``size``, each one prompt that carries the whole group
    (a trailing partial group is dropped: synthetic prompts are made a multiple of ``size``, a file's
    last few lines may be left out)."""
    if size == 1:
        return prompts
    groups = [prompts[start : start + size] for start in range(0, len(prompts) - size + 1, size)]
    return [
        Prompt(group[0].text, sum(p.tokens for p in group), 0, tuple(p.text for p in group))
        for group in groups
    ]


class PromptMaker:
    def __init__(self, counter: TokenCounter, seed: int) -> None:
        self.counter = counter
        self.rng = random.Random(seed)
        self.corpus = counter.encode(corpus_text(seed))
        if len(self.corpus) < 16:
            raise ValueError("the tokenizer turned the prompt corpus into almost nothing")

    def _slice(self, count: int) -> list[int]:
        start = self.rng.randrange(len(self.corpus))
        ids: list[int] = []
        while len(ids) < count:
            ids.extend(self.corpus[start : start + count - len(ids)])
            start = 0
        return ids

    def prompt_of(self, tokens: int) -> Prompt:
        """A prompt the tokenizer counts as ``tokens`` long (or the nearest it allows, for tokenizers
        whose decode and encode do not round-trip)."""
        want = max(1, min(tokens, MAX_PROMPT_TOKENS))
        ids = self._slice(want)
        best: tuple[int, str] | None = None
        for _ in range(8):
            text = self.counter.decode(ids).strip()
            counted = self.counter.count(text)
            if best is None or abs(counted - want) < abs(best[0] - want):
                best = (counted, text)
            if counted == want:
                break
            if counted > want:
                ids = ids[: max(1, len(ids) - (counted - want))]
            else:
                ids = ids + self._slice(want - counted)
        assert best is not None
        return Prompt(best[1], best[0], 0)

    def make(
        self,
        count: int,
        mean: int,
        stddev: int,
        output_mean: int,
        output_stddev: int,
    ) -> list[Prompt]:
        """``count`` prompts; lengths ~ N(mean, stddev) (at least 1), output lengths ~ N(output_mean,
        output_stddev) (at least 1) when ``output_mean`` is set."""
        prompts = []
        for _ in range(count):
            length = max(1, round(self.rng.gauss(mean, stddev))) if stddev else mean
            prompt = self.prompt_of(length)
            prompts.append(
                Prompt(prompt.text, prompt.tokens, self._output_length(output_mean, output_stddev))
            )
        return prompts

    def from_texts(self, texts: list[str], output_mean: int, output_stddev: int) -> list[Prompt]:
        """Prompts of the given texts (``--input-file``), counted by the tokenizer, with output
        lengths drawn as for synthetic ones."""
        counts = self.counter.count_many(texts)
        return [
            Prompt(text, tokens, self._output_length(output_mean, output_stddev))
            for text, tokens in zip(texts, counts, strict=True)
        ]

    def _output_length(self, mean: int, stddev: int) -> int:
        """Output tokens to ask for: ~ N(mean, stddev), at least 1; 0 (the server decides) without a mean."""
        if not mean:
            return 0
        return max(1, round(self.rng.gauss(mean, stddev))) if stddev else mean
