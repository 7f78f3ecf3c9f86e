"""What the load generator keeps of each generation request: when it was sent, when each piece of text
arrived, and the text itself (tokens are counted afterwards, off the measured path)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trt.perf.genai.prompts import Prompt


@dataclass
class RequestRecord:
    prompt: Prompt
    start_ns: int = 0  # perf_counter_ns when the request was handed to the connection
    times_ns: list[int] = field(default_factory=list)  # one per response that carried text
    texts: list[str] = field(default_factory=list)
    end_ns: int = 0  # when the request completed (its last byte, final response or [DONE])
    error: str | None = None

    def received(self, text: str, at_ns: int) -> None:
        """A response; those without text (the final flag on its own, a role-only chat chunk) are not
        responses in genai-perf's sense: TTFT is the first response that carries text."""
        if text:
            self.times_ns.append(at_ns)
            self.texts.append(text)

    def answered(self, at_ns: int) -> None:
        """The one response of a request that answers with no text (embeddings)."""
        self.times_ns.append(at_ns)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.times_ns)
