"""An offline character-level tokenizer (HF `tokenizers` wrapped in `PreTrainedTokenizerFast`)."""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Everything the synthetic tasks and simple math text can contain.
CHARS = list("0123456789+-*/=()[]<>.,:;?!#%$^_'\" \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def build_char_tokenizer(extra_chars: str = "") -> PreTrainedTokenizerFast:
    """One token per character; unknown characters map to <unk>. Deterministic: no training data needed."""
    chars = list(dict.fromkeys(CHARS + list(extra_chars)))
    vocab = {tok: i for i, tok in enumerate(SPECIAL + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # every character its own piece
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>")
    fast.padding_side = "left"
    return fast
