"""The example generative model, ``tiny_llm``: a Llama decoder small enough to commit, with a
tokenizer trained here, written as a Hugging Face checkpoint beside its Triton ``model.py``.

Nothing is downloaded. The tokenizer is a byte-level BPE that ``tokenizers`` trains on
``scripts/data/tiny_llm_corpus.md`` (a frozen copy of the README); the network is
``transformers``' ``LlamaForCausalLM`` built from a config, its weights drawn from a seeded numpy
generator in name order (so they are the same on every machine and every library version). Its
text is word salad from the tokenizer's vocabulary: what it shows is the serving path, token by
token, through a real forward pass.

The files written into ``tiny_llm/1/`` are ``config.json``, ``generation_config.json`` and
``model.safetensors`` (what ``transformers`` and vLLM load), ``tokenizer.json`` and
``tokenizer_config.json`` (with the chat template). ``model.py``, ``tiny_llm_engine.py`` and
``config.pbtxt`` are sources kept in the repository; they are copied when generating elsewhere.
Validation loads the checkpoint with ``transformers`` and checks that the engine's own forward pass
gives the same logits, prefill and token by token.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

NAME = "tiny_llm"
SCRIPTS = Path(__file__).resolve().parent
CORPUS = SCRIPTS / "data" / "tiny_llm_corpus.md"
SOURCES = SCRIPTS.parent / "model_repository" / NAME  # model.py, the engine and config.pbtxt
SOURCE_FILES = ("config.pbtxt", "1/model.py", "1/tiny_llm_engine.py")
SEED = 0
GENAI_PIN = "pip install 'trt-serve[genai]'"

VOCAB_SIZE = 1024
HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 192
LAYERS = 2
HEADS = 4
KV_HEADS = 2
MAX_POSITIONS = 1024
INIT_STD = 0.02  # transformers' initializer_range for Llama

BOS, EOS, END_OF_TURN = "<|bos|>", "<|eos|>", "<|end|>"
SPECIAL_TOKENS = [BOS, EOS, END_OF_TURN, "<|system|>", "<|user|>", "<|assistant|>"]
# Each turn is its role's token, a newline, the content and <|end|>; generation stops at <|end|>.
# The OpenAI "developer" role is this model's "system"; other roles are written as they come.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "{%- set role = 'system' if message['role'] == 'developer' else message['role'] -%}\n"
    "<|{{ role }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor -%}\n"
    "{%- if add_generation_prompt -%}\n<|assistant|>\n{% endif -%}\n"
)


def train_tokenizer(corpus: Path) -> Tokenizer:
    """Byte-level BPE (as GPT-2 and Llama 3 use), a BOS token before every encoded text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus.read_text(encoding="utf-8").splitlines(keepends=True), trainer)
    bos = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos)]
    )
    return tokenizer


def tokenizer_config() -> dict[str, Any]:
    """What ``transformers.AutoTokenizer`` reads beside ``tokenizer.json``, and where the chat template
    lives for the OpenAI front end."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": END_OF_TURN,
        "add_bos_token": True,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config(tokenizer: Tokenizer) -> dict[str, Any]:
    """``generation_config.json``: stop tokens, and the tokens never to generate (transformers'
    ``suppress_tokens``): special tokens other than the two that end a text, and single bytes that
    are not printable text on their own. Untrained weights would otherwise pick stray bytes and
    control characters as often as words."""
    keep = {tokenizer.token_to_id(EOS), tokenizer.token_to_id(END_OF_TURN)}
    suppressed = []
    for token_id in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        special = tokenizer.id_to_token(token_id) in SPECIAL_TOKENS
        if (special and token_id not in keep) or (not special and not _printable(text)):
            suppressed.append(token_id)
    return {
        "bos_token_id": tokenizer.token_to_id(BOS),
        "eos_token_id": sorted(keep),
        "suppress_tokens": suppressed,
    }


def _printable(text: str) -> bool:
    return bool(text) and all((ch.isprintable() and ch != "\ufffd") or ch in "\n\t" for ch in text)


def model_config(tokenizer: Tokenizer) -> dict[str, Any]:
    """A Llama ``config.json`` written out in full, so its bytes do not depend on the transformers
    release (``save_pretrained`` adds its version and every default)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": tokenizer.get_vocab_size(),
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": INIT_STD,
        "bos_token_id": tokenizer.token_to_id(BOS),
        "eos_token_id": [tokenizer.token_to_id(EOS), tokenizer.token_to_id(END_OF_TURN)],
        "torch_dtype": "float32",
    }


def build_weights(config: dict[str, Any]) -> dict[str, Any]:
    """``LlamaForCausalLM(config)``'s parameters by name, filled from a seeded generator: norms at one,
    every matrix normal with the config's initializer range."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shapes = {name: tuple(p.shape) for name, p in LlamaForCausalLM(LlamaConfig(**config)).named_parameters()}
    rng = np.random.default_rng(SEED)
    weights = {}
    for name in sorted(shapes):
        if name.endswith("norm.weight"):
            values = np.ones(shapes[name], dtype=np.float32)
        else:
            values = (rng.standard_normal(shapes[name]) * config["initializer_range"]).astype(np.float32)
        weights[name] = torch.from_numpy(values)
    return weights


def generate_tiny_llm(output: Path) -> Path | None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never ask the Hub
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from safetensors.torch import save_file
    except ImportError as exc:
        print(f"skipping {NAME}: it needs {exc.name}; install it with `{GENAI_PIN}`")
        return None
    model_dir = output / NAME
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    if model_dir.resolve() != SOURCES.resolve():
        for relative in SOURCE_FILES:
            shutil.copyfile(SOURCES / relative, model_dir / relative)
    tokenizer = train_tokenizer(CORPUS)
    (version_dir / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n", encoding="utf-8")
    _write_json(version_dir / "tokenizer_config.json", tokenizer_config())
    config = model_config(tokenizer)
    _write_json(version_dir / "config.json", config)
    _write_json(version_dir / "generation_config.json", generation_config(tokenizer))
    weights_path = version_dir / "model.safetensors"
    save_file(build_weights(config), str(weights_path), metadata={"format": "pt"})
    validate_tiny_llm(version_dir)
    return weights_path


def _write_json(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_engine(version_dir: Path) -> ModuleType:
    """The engine module beside model.py, imported from its file."""
    spec = importlib.util.spec_from_file_location("tiny_llm_engine", version_dir / "tiny_llm_engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def validate_tiny_llm(version_dir: Path) -> None:
    """transformers loads the checkpoint with every weight used, and the engine's logits match its
    own: after the prompt, then for eight greedy tokens decoded one at a time from the cache."""
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    transformers.logging.disable_progress_bar()
    reference = AutoModelForCausalLM.from_pretrained(str(version_dir), local_files_only=True).eval()
    engine = load_engine(version_dir)
    decoder = engine.LlamaDecoder(version_dir)
    tokenizer = Tokenizer.from_file(str(version_dir / "tokenizer.json"))
    ids = tokenizer.encode("trt serve speaks Triton's protocol").ids
    cache = decoder.new_cache()
    logits = decoder.prefill(ids, cache)
    for step in range(8):
        with torch.inference_mode():
            expected = reference(torch.tensor([ids])).logits[0, -1]
        if not torch.allclose(logits, expected, atol=1e-4, rtol=1e-4):
            worst = float((logits - expected).abs().max())
            raise RuntimeError(f"validation failed: {NAME} logits differ from transformers' at step {step} "
                               f"(largest difference {worst:.2e})")  # fmt: skip
        ids.append(int(torch.argmax(expected)))
        logits = decoder.decode([ids[-1]], [cache])[0]
    text = "Hello, <|user|> ünïcode 日本"
    if tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) != BOS + text:
        raise RuntimeError(f"validation failed: {NAME}'s tokenizer does not round-trip {text!r}")
