"""tiny_embedding: text embeddings with the I/O contract of Triton's vLLM backend for embeddings.

Input: ``embedding_request``, a JSON object ``{"input": text or token ids, "pooling_params":
{"dimensions": [d]}}`` (what Triton's OpenAI front end sends vLLM), and optionally the
``return_num_input_tokens`` / ``return_num_output_tokens`` flags. Output: ``text_output``, the
vector as a JSON list of numbers, and when asked ``num_input_tokens`` / ``num_output_tokens``.

The model is a bag of words: each word (a run of letters and digits, or one other non-space
character, lower-cased) is hashed to a token id, each token id has a fixed random vector (drawn from
the configured seed), and the embedding is the mean of its tokens' vectors scaled to length one.
Texts that share words point the same way; the same text always gives the same vector. Asked for
``d`` dimensions, it answers the first ``d`` components, scaled to length one again.
"""

import hashlib
import json
import re

import numpy as np
import triton_python_backend_utils as pb_utils

WORD = re.compile(r"\w+|[^\w\s]")
MAX_TOKEN_ID = 2**31 - 1


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.dimensions = int(parameters.get("dimensions", "64"))
        self.vocabulary = int(parameters.get("vocabulary", "4096"))
        self.max_tokens = int(parameters.get("max_input_tokens", "8192"))
        if not (1 <= self.dimensions <= 4096 and 1 <= self.vocabulary <= 1 << 20 and self.max_tokens >= 1):
            raise pb_utils.TritonModelException(
                "tiny_embedding: dimensions, vocabulary or max_input_tokens out of range"
            )
        rng = np.random.default_rng(int(parameters.get("seed", "0")))
        self.vectors = rng.standard_normal((self.vocabulary, self.dimensions), dtype=np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._answer(request))
            except ValueError as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
        return responses

    def _answer(self, request):
        raw = pb_utils.get_input_tensor_by_name(request, "embedding_request").as_numpy().reshape(-1)
        if raw.size != 1:
            raise ValueError(f"embedding_request must be one JSON object, got {raw.size} elements")
        try:
            document = json.loads(raw[0])
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"embedding_request is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise ValueError("embedding_request must be a JSON object")
        tokens = self._tokens(document.get("input"))
        dimensions = self._dimensions(document.get("pooling_params") or {})
        vector = self.vectors[tokens].mean(axis=0)[:dimensions]
        norm = float(np.linalg.norm(vector))
        if norm > 0.0:
            vector = vector / norm
        outputs = [
            pb_utils.Tensor("text_output", np.array([json.dumps(vector.tolist()).encode()], dtype=np.object_))
        ]
        if _flag(request, "return_num_input_tokens"):
            outputs.append(pb_utils.Tensor("num_input_tokens", np.array([len(tokens)], dtype=np.uint32)))
        if _flag(request, "return_num_output_tokens"):
            outputs.append(pb_utils.Tensor("num_output_tokens", np.array([0], dtype=np.uint32)))
        return pb_utils.InferenceResponse(outputs)

    def _tokens(self, given):
        if isinstance(given, str):
            ids = []
            for word in WORD.finditer(given.lower()):  # counted as found: a long text stops at the limit
                if len(ids) == self.max_tokens:
                    raise ValueError(f"the input has more than {self.max_tokens} tokens, this model's limit")
                ids.append(
                    int.from_bytes(hashlib.blake2b(word.group().encode(), digest_size=8).digest(), "little")
                )
        elif isinstance(given, list) and all(type(t) is int and 0 <= t <= MAX_TOKEN_ID for t in given):
            ids = given
        else:
            raise ValueError("input must be a string or a list of token ids (integers from 0 to 2^31-1)")
        if not ids:
            raise ValueError("the input has no tokens")
        if len(ids) > self.max_tokens:
            raise ValueError(f"the input has {len(ids)} tokens; this model takes at most {self.max_tokens}")
        return np.array(ids, dtype=np.uint64) % np.uint64(self.vocabulary)

    def _dimensions(self, pooling):
        if not isinstance(pooling, dict):
            raise ValueError("pooling_params must be a JSON object")
        asked = pooling.get("dimensions")
        if asked is None:
            return self.dimensions
        if isinstance(asked, list) and len(asked) == 1:
            asked = asked[0]
        if type(asked) is not int or not 1 <= asked <= self.dimensions:
            raise ValueError(f"dimensions must be from 1 to {self.dimensions}, got {asked!r}")
        return asked


def _flag(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return tensor is not None and bool(tensor.as_numpy().reshape(-1)[0])
