"""Documents longer than a run's length cap (`--max-len`, else the model's positions): split into chunks of at
most the cap (the default, every token trained) or cut to it (its tail untrained), `train --long-documents`.

A chunk is a document of its own: attention does not reach back into the chunk before it, and the chunk's first
token is not predicted from the previous chunk's last (one next-token target per split is lost, no token).
Chunks stay consecutive, in the document's place.
"""

from __future__ import annotations

from dataclasses import dataclass

LONG_DOCUMENTS = ("chunk", "cut")
"""What a run does with a document longer than its cap."""


@dataclass(frozen=True)
class LongDocuments:
    """What a run did with its long documents: how many there were, and into how many chunks they went (0 when
    cut)."""

    mode: str
    limit: int
    """Tokens a step's document may have (the cap, rounded down to the layout unit)."""
    documents: int
    """Documents of the dataset (before any split)."""
    long: int
    """Documents longer than `limit`."""
    chunks: int = 0
    """Chunks the long documents were split into (0 when cut)."""
    cut_tokens: int = 0
    """Tokens beyond `limit` of the long documents (the tokens a cut leaves untrained)."""

    def line(self) -> str:
        """One line for the run's start: what happened to the long documents, and the flag for the other way."""
        if not self.long:
            return f"data: none of the {self.documents:,} documents is longer than {self.limit:,} tokens"
        head = f"data: {self.long:,} of {self.documents:,} documents are longer than {self.limit:,} tokens"
        if self.mode == "chunk":
            return (f"{head}: split into {self.chunks:,} chunks of at most {self.limit:,}, every token trained "
                    "(--long-documents cut cuts them instead)")
        return (f"{head}: cut to {self.limit:,}, {self.cut_tokens:,} of their tokens untrained "
                "(--long-documents chunk trains them)")


def split(doc, limit: int) -> list:
    """`doc` (a token list, or a length) as consecutive chunks of at most `limit` tokens."""
    if isinstance(doc, int):
        return [min(limit, doc - start) for start in range(0, doc, limit)]
    return [doc[start:start + limit] for start in range(0, len(doc), limit)]


def handle(docs: list, limit: int, mode: str) -> tuple[list, LongDocuments]:
    """(`docs` with each one longer than `limit` split into chunks (mode chunk) or left for the step to cut
    (mode cut), what was done); `docs` are token lists or lengths."""
    sizes = [d if isinstance(d, int) else len(d) for d in docs]
    long = [n for n in sizes if n > limit]
    cut = sum(n - limit for n in long)
    if mode != "chunk" or not long:
        return list(docs), LongDocuments(mode, limit, len(docs), len(long), 0, cut)
    out = []
    for doc, n in zip(docs, sizes):
        out += split(doc, limit) if n > limit else [doc]
    return out, LongDocuments(mode, limit, len(docs), len(long), len(out) - len(docs) + len(long), cut)
