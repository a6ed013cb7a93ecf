"""A small text corpus and a BPE tokenizer trained on it on the fly (tokenizers' BpeTrainer): what the real-text
tests train and measure with. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

SENTENCES = (
    "the cat sat on the mat and the dog sat on the log",
    "a quick brown fox jumps over the lazy dog near the river bank",
    "we train a small model on a few short sentences of plain text",
    "the model reads each document and predicts the next token",
    "sequence parallel training splits long sequences across devices",
    "the dog and the cat play on the mat by the log in the sun",
)


def documents(count: int, seed: int = 0) -> list[str]:
    """`count` documents, each one to four of the sentences (a seeded choice)."""
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(SENTENCES) for _ in range(rng.randint(1, 4))) for _ in range(count)]


def build_tokenizer(folder: Path, vocab_size: int = 200) -> Path:
    """A byte-level BPE tokenizer trained on the sentences, saved as folder/tokenizer.json (its path)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(SENTENCES, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path
