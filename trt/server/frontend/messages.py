"""What crosses between a front-end worker process and the core process, one dataclass per message.

Every field is an int, a bool, a str, bytes or a list of (str, str) / (bytes, bytes) pairs: the only
kinds ``codec`` writes and reads, so nothing a worker sends can make the core build anything else
(an answer's body may leave the core as a ``SplitBody``, in pieces; it arrives as bytes).
``call`` numbers a request within its worker; answers and cancellations name it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trt.server.http.messages import SplitBody

# -- worker -> core -------------------------------------------------------------------------------


@dataclass(slots=True)
class Ready:
    """The worker listens on its sockets (sent once, after start)."""

    pid: int


@dataclass(slots=True)
class HttpCall:
    """A parsed HTTP request, as ``HttpProtocol`` hands it to its handler."""

    call: int
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes
    started_ns: int  # perf_counter_ns (CLOCK_MONOTONIC: one clock for every process of the host)
    received_ns: int


@dataclass(slots=True)
class GrpcUnary:
    """A unary gRPC call's one request message."""

    call: int
    path: str
    data: bytes
    # The call's metadata, where the core forwards some to models (--grpc-header-forward-pattern);
    # otherwise empty.
    metadata: list[tuple[str, str]]


@dataclass(slots=True)
class GrpcOpen:
    """A streaming gRPC call starts (``ModelStreamInfer``); its messages follow."""

    call: int
    path: str
    metadata: list[tuple[str, str]]  # as GrpcUnary's


@dataclass(slots=True)
class GrpcMessage:
    call: int
    data: bytes


@dataclass(slots=True)
class GrpcHalfClose:
    """The client ended its side of a streaming call: answers may still come."""

    call: int


@dataclass(slots=True)
class Cancel:
    """The client is gone (disconnect, RST_STREAM, deadline): the core cancels the request."""

    call: int


@dataclass(slots=True)
class Written:
    """The worker wrote one streamed piece to its client: the core may send one more (the window)."""

    call: int


@dataclass(slots=True)
class InferLayout:
    """A JSON header of binary inference requests to ``model_name`` that ``InferCall``s name by
    ``layout``: numbered in increasing order, the last ``frontend.layouts.LAYOUTS`` kept at both ends."""

    layout: int
    model_name: str
    model_version: str
    accept_encoding: str  # the requests' Accept-Encoding ("": none)
    header: bytes


@dataclass(slots=True)
class InferCall:
    """A binary inference request sent apart: its layout's number and the tensors' bytes after its header."""

    call: int
    layout: int
    binary: bytes
    started_ns: int
    received_ns: int


# -- core -> worker -------------------------------------------------------------------------------


@dataclass(slots=True)
class HttpAnswer:
    """An HTTP response's head and body; with ``streamed``, its body follows as ``Chunk``s, then ``End``."""

    call: int
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes | SplitBody  # a SplitBody only as the core sends it; read back as bytes
    streamed: bool


@dataclass(slots=True)
class Chunk:
    """One piece of a streamed answer: an HTTP chunk (server-sent event), or a gRPC stream message."""

    call: int
    data: bytes


@dataclass(slots=True)
class End:
    """The end of a streamed HTTP answer."""

    call: int


@dataclass(slots=True)
class GrpcReply:
    """A unary call's reply message; the call ends OK."""

    call: int
    data: bytes


@dataclass(slots=True)
class GrpcFinish:
    """A gRPC call ends with this status (OK after a stream, or an error at any time)."""

    call: int
    code: int
    message: str


@dataclass(slots=True)
class InferAnswer:
    """A 200 answer to an ``InferCall`` whose headers say only what ``layouts.answer_headers`` rebuilds."""

    call: int
    json_length: int  # of the JSON before the binary tensors; -1: the body is JSON alone
    content_encoding: str  # "": not compressed
    body: bytes | SplitBody  # a SplitBody only as the core sends it; read back as bytes


@dataclass(slots=True)
class Stop:
    """Stop accepting, finish what is in flight (up to ``timeout_ms``), exit."""

    timeout_ms: int


Message = (
    Ready | HttpCall | GrpcUnary | GrpcOpen | GrpcMessage | GrpcHalfClose | Cancel | Written
    | HttpAnswer | Chunk | End | GrpcReply | GrpcFinish | Stop | InferLayout | InferCall | InferAnswer
)  # fmt: skip

# The tag of each kind on the wire; a new message goes at the end (workers and core are one version).
KINDS: tuple[type[Message], ...] = (
    Ready, HttpCall, GrpcUnary, GrpcOpen, GrpcMessage, GrpcHalfClose, Cancel, Written,
    HttpAnswer, Chunk, End, GrpcReply, GrpcFinish, Stop, InferLayout, InferCall, InferAnswer,
)  # fmt: skip
